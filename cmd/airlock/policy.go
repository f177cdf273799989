//go:build !airlock_thin

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"airlock/policies"
)

// policyCmd is the parent of every `airlock policy ...` command; other
// files add subcommands to it.
var policyCmd = &cobra.Command{
	Use:   "policy",
	Short: "Check, explain and test egress policies",
	Long: `Work with Airlock's TOML egress policies (see docs/policy.md).

  airlock policy check FILE...       validate; print every error as file:line:col
  airlock policy explain FILE REQ    show the verdict for one request and why
  airlock policy test FILE...        run the [[tests]] embedded in each policy`,
}

var (
	checkStrict, checkJSON bool
	explainJSONOut         bool
	explainExitCode        bool
	testOpts               testOptions
	policyStdin            io.Reader = os.Stdin // what "-" reads
)

var policyCheckCmd = &cobra.Command{
	Use:   "check [--strict] [--json] FILE|DIR|-...",
	Short: "Validate policy files and print every error and warning with its position",
	Long: `Validate policy files (a directory: its *.toml files, as serve reads
policy_dir; "-": standard input). Every problem in every file is printed, one per line,
as file:line:col: key.path: message; warnings (valid, but a reviewer would
reject them: over-broad wildcards, cidrs reaching the metadata service,
ties between categories, routes that never match... see docs/policy.md,
"Warnings") as file:line:col: warning: key.path: message.

Exits 1 if any file has an error, or with --strict a warning; 2 on a usage
error. CI and the shipped examples use --strict. --json prints one object
instead (docs/policy.md, "Machine output").`,
	Args: cobra.MinimumNArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		policyStdin = cmd.InOrStdin()
		files, err := expandPolicyArgs(args)
		if err != nil {
			return err
		}
		if checkJSON {
			return policyCheckJSON(cmd.OutOrStdout(), files, checkStrict)
		}
		return policyCheck(cmd.OutOrStdout(), cmd.ErrOrStderr(), files, checkStrict)
	},
}

var policyExplainCmd = &cobra.Command{
	Use:   "explain FILE REQUEST",
	Short: "Show the verdict for one request, the rule that decided and the rules considered",
	Long: `Decide one request against a policy and explain it. REQUEST is one of

  'GET https://host.example.test/path?query'   an HTTP request (any method;
                                               a bare URL is a GET)
  'dns NAME [QTYPE]'                           a DNS query (default type A)
  'connect HOST:PORT'                          a connection (TLS server name HOST)

optionally followed by ip=ADDR (the destination address), sni=NAME or
package=ECO:NAME@VERSION. The words may also be given as separate arguments.

Exit status: 0 (whatever the verdict, unless --exit-code), 1 the policy does
not load, or with --exit-code the request is denied (a deny verdict, or an
audit verdict with would_deny), 2 a usage error or a malformed REQUEST.`,
	Example: `  airlock policy explain policies/examples/coding-agent.toml 'GET https://git.example.test/acme/app.git/info/refs?service=git-receive-pack'
  airlock policy explain policies/examples/coding-agent.toml dns registry.example.test TXT
  airlock policy explain policies/examples/coding-agent.toml connect docs.example.test:443`,
	Args: cobra.MinimumNArgs(2),
	RunE: func(cmd *cobra.Command, args []string) error {
		policyStdin = cmd.InOrStdin()
		return policyExplain(cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], strings.Join(args[1:], " "))
	},
}

var policyTestCmd = &cobra.Command{
	Use:   "test [-o text|json|junit|github] [-v] [--run REGEX] FILE|DIR|-...",
	Short: "Run the [[tests]] embedded in policy files",
	Long: `Run each policy's [[tests]] (a directory: its *.toml files; "-": standard
input). A failing case prints its position, the request,
the expected and the actual verdict with the rule that decided.

  -o text     failures on stderr, a summary line per file (default); -v lists
              passing cases too
  -o json     one JSON object: every case with its verdict (docs/policy.md)
  -o junit    JUnit XML, one testsuite per file, for CI test reports
  -o github   GitHub Actions ::error annotations at each failing case

--run REGEX runs only the cases whose name or request line matches (Go
regexp syntax); selecting none is a failure, so a typo cannot pass CI.

Exit status: 0 every case passed, 1 a case failed, a file does not load or has
no [[tests]], 2 a usage error.`,
	Args: cobra.MinimumNArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		policyStdin = cmd.InOrStdin()
		files, err := expandPolicyArgs(args)
		if err != nil {
			return err
		}
		return policyTest(cmd.OutOrStdout(), cmd.ErrOrStderr(), files, testOpts)
	},
}

func init() {
	policyCheckCmd.Flags().BoolVar(&checkStrict, "strict", false, "treat warnings as errors (exit 1)")
	policyCheckCmd.Flags().BoolVar(&checkJSON, "json", false, "print the result as one JSON object")
	policyExplainCmd.Flags().BoolVar(&explainJSONOut, "json", false, "print the explanation as one JSON object")
	policyExplainCmd.Flags().BoolVar(&explainExitCode, "exit-code", false, "exit 1 when the request is denied (or would be, in audit mode)")
	tf := policyTestCmd.Flags()
	tf.StringVarP(&testOpts.output, "output", "o", "text", "output format: "+strings.Join(testFormats, ", "))
	tf.BoolVarP(&testOpts.verbose, "verbose", "v", false, "text: list passing cases too")
	tf.StringVar(&testOpts.run, "run", "", "only run cases whose name or request matches this regular expression")
	policyCmd.AddCommand(policyCheckCmd, policyExplainCmd, policyTestCmd)
	rootCmd.AddCommand(policyCmd)
}

// printLoadError prints a policy load error, one positioned line each.
func printLoadError(w io.Writer, err error) {
	var el policies.ErrorList
	if errors.As(err, &el) {
		for _, e := range el {
			fmt.Fprintln(w, e.Error())
		}
		return
	}
	fmt.Fprintln(w, err)
}

func policyCheck(out, errw io.Writer, files []string, strict bool) error {
	failed := false
	for _, f := range files {
		p, err := loadPolicy(policyStdin, f)
		if err != nil {
			printLoadError(errw, err)
			failed = true
			continue
		}
		warns := p.Warnings()
		for _, w := range warns {
			fmt.Fprintln(errw, warningLine(w))
		}
		status := "ok"
		switch {
		case len(warns) > 0 && strict:
			failed = true
			fmt.Fprintf(errw, "%s: %s (--strict)\n", f, plural(len(warns), "warning"))
			continue
		case len(warns) > 0:
			status = "ok with " + plural(len(warns), "warning")
		}
		fmt.Fprintf(out, "%s: %s (%s, %s, sha256 %s)\n", f, status, plural(len(p.Categories()), "category"),
			plural(len(p.Tests()), "test"), p.Hash()[:12])
	}
	if failed {
		return exitError{1}
	}
	return nil
}

// warningLine prints a warning as file:line:col: warning: key.path: message.
func warningLine(w *policies.Error) string {
	s := w.Pos.String() + ": warning: "
	if w.Path != "" {
		s += w.Path + ": "
	}
	return s + w.Msg
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// defaultMethod makes a bare URL a GET, as curl reads it:
// "https://host/path" is "GET https://host/path".
func defaultMethod(line string) string {
	l := strings.ToLower(strings.TrimSpace(line))
	if strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://") {
		return "GET " + strings.TrimSpace(line)
	}
	return line
}

func policyExplain(out, errw io.Writer, file, line string) error {
	p, err := loadPolicy(policyStdin, file)
	if err != nil {
		printLoadError(errw, err)
		return exitError{1}
	}
	req, err := policies.ParseRequest(defaultMethod(line))
	if err != nil {
		return usagef("request %q: %v", line, err)
	}
	ex := p.Explain(req)
	if explainJSONOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(explanationJSON(file, line, ex))
	} else {
		writeExplanation(out, ex)
	}
	if err != nil {
		return err
	}
	if explainExitCode && (ex.Verdict.Action == policies.ActionDeny || ex.Verdict.WouldDeny) {
		return exitError{1}
	}
	return nil
}

func verdictLine(v policies.Verdict) string {
	s := v.Action.String()
	if v.WouldDeny {
		s += " (would_deny)"
	}
	return s
}

func writeExplanation(w io.Writer, ex policies.Explanation) {
	v := ex.Verdict
	fmt.Fprintf(w, "verdict:   %s\n", verdictLine(v))
	if v.Category != "" {
		fmt.Fprintf(w, "category:  %s (%s)\n", v.Category, v.Kind)
	} else {
		fmt.Fprintf(w, "category:  none\n")
	}
	fmt.Fprintf(w, "rule:      %s\n", v.Rule)
	fmt.Fprintf(w, "reason:    %s\n", v.Reason)
	if v.Cat != nil && v.Action.Allows() {
		c := v.Cat
		handling := "inspect (TLS interception, per-request decisions)"
		if !c.Inspect {
			handling = "splice (decided on the server name only)"
		}
		fmt.Fprintf(w, "handling:  %s\n", handling)
		if c.Inject != nil {
			fmt.Fprintf(w, "inject:    header %s from secret %q\n", c.Inject.Header, c.Inject.Secret)
		}
	}
	if len(ex.Considered) == 0 {
		return
	}
	fmt.Fprintln(w, "considered:")
	for _, c := range ex.Considered {
		fmt.Fprintf(w, "  %s: %s\n", c.Rule, c.Outcome)
	}
}

func policyTest(out, errw io.Writer, files []string, opt testOptions) error {
	if !slices.Contains(testFormats, opt.output) {
		return usagef("-o %q: want one of %s", opt.output, strings.Join(testFormats, ", "))
	}
	var match *regexp.Regexp
	if opt.run != "" {
		var err error
		if match, err = regexp.Compile(opt.run); err != nil {
			return usagef("--run %q: %v", opt.run, err)
		}
	}
	rep := runPolicyTests(files, match)
	var err error
	switch opt.output {
	case "json":
		err = writeTestJSON(out, &rep)
	case "junit":
		err = writeTestJUnit(out, &rep)
	case "github":
		writeTestGitHub(out, &rep)
	default:
		writeTestText(out, errw, &rep, opt.verbose)
	}
	if err != nil {
		return err
	}
	if !rep.ok() {
		return exitError{1}
	}
	return nil
}

// testWarnings are the policy's warnings about its i-th [[tests]] entry.
func testWarnings(p *policies.Policy, i int) []*policies.Error {
	prefix := fmt.Sprintf("tests[%d].", i)
	var out []*policies.Error
	for _, w := range p.Warnings() {
		if strings.HasPrefix(w.Path, prefix) {
			out = append(out, w)
		}
	}
	return out
}

func policyCheckJSON(out io.Writer, files []string, strict bool) error {
	res := checkResultJSON{OK: true, Strict: strict, Files: []checkFileJSON{}}
	for _, f := range files {
		fj := checkFileJSON{File: f, Errors: []jsonProblem{}, Warnings: []jsonProblem{}}
		p, err := loadPolicy(policyStdin, f)
		if err != nil {
			fj.Errors = loadProblems(f, err)
		} else {
			fj.SHA256, fj.Categories, fj.Tests = p.Hash(), len(p.Categories()), len(p.Tests())
			fj.Warnings = problemsJSON(p.Warnings())
		}
		fj.OK = err == nil && (!strict || len(fj.Warnings) == 0)
		res.OK = res.OK && fj.OK
		res.Files = append(res.Files, fj)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return err
	}
	if !res.OK {
		return exitError{1}
	}
	return nil
}
