package main

import (
	"errors"
	"fmt"
	"io"
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

var checkStrict bool

var policyCheckCmd = &cobra.Command{
	Use:   "check [--strict] FILE...",
	Short: "Validate policy files and print every error and warning with its position",
	Long: `Validate policy files. Every problem in every file is printed, one per line,
as file:line:col: key.path: message; warnings (valid, but a reviewer would
reject them: over-broad wildcards, cidrs reaching the metadata service,
ties between categories, routes that never match... see docs/policy.md,
"Warnings") as file:line:col: warning: key.path: message.

Exits 1 if any file has an error, or with --strict a warning. CI and the
shipped examples use --strict.`,
	Args: cobra.MinimumNArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		return policyCheck(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, checkStrict)
	},
}

var policyExplainCmd = &cobra.Command{
	Use:   "explain FILE REQUEST",
	Short: "Show the verdict for one request, the rule that decided and the rules considered",
	Long: `Decide one request against a policy and explain it. REQUEST is one of

  'GET https://host.example.test/path?query'   an HTTP request (any method)
  'dns NAME [QTYPE]'                           a DNS query (default type A)
  'connect HOST:PORT'                          a connection (TLS server name HOST)

optionally followed by ip=ADDR (the destination address), sni=NAME or
package=ECO:NAME@VERSION. The words may also be given as separate arguments.`,
	Example: `  airlock policy explain policies/examples/coding-agent.toml 'GET https://git.example.test/acme/app.git/info/refs?service=git-receive-pack'
  airlock policy explain policies/examples/coding-agent.toml dns registry.example.test TXT
  airlock policy explain policies/examples/coding-agent.toml connect docs.example.test:443`,
	Args: cobra.MinimumNArgs(2),
	RunE: func(cmd *cobra.Command, args []string) error {
		return policyExplain(cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], strings.Join(args[1:], " "))
	},
}

var policyTestCmd = &cobra.Command{
	Use:   "test FILE...",
	Short: "Run the [[tests]] embedded in policy files",
	Long: `Run each policy's [[tests]]. A failing case prints its position, the request,
the expected and the actual verdict with the rule that decided. Exits 1 if any
case fails or any file does not load; a policy without tests counts as a failure.`,
	Args: cobra.MinimumNArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		return policyTest(cmd.OutOrStdout(), cmd.ErrOrStderr(), args)
	},
}

func init() {
	policyCheckCmd.Flags().BoolVar(&checkStrict, "strict", false, "treat warnings as errors (exit 1)")
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
		p, err := policies.Load(f)
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

func policyExplain(out, errw io.Writer, file, line string) error {
	p, err := policies.Load(file)
	if err != nil {
		printLoadError(errw, err)
		return exitError{1}
	}
	req, err := policies.ParseRequest(line)
	if err != nil {
		fmt.Fprintf(errw, "airlock: request %q: %v\n", line, err)
		return exitError{2}
	}
	writeExplanation(out, p.Explain(req))
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

func policyTest(out, errw io.Writer, files []string) error {
	failed := false
	for _, f := range files {
		p, err := policies.Load(f)
		if err != nil {
			printLoadError(errw, err)
			failed = true
			continue
		}
		results := p.RunTests()
		if len(results) == 0 {
			fmt.Fprintf(errw, "%s: no [[tests]]: a policy without tests is not tested\n", f)
			failed = true
			continue
		}
		pass := 0
		for i, r := range results {
			if r.Pass {
				pass++
				continue
			}
			failed = true
			writeFailure(errw, r)
			for _, w := range testWarnings(p, i) { // a rule or category that does not exist
				fmt.Fprintf(errw, "    %s\n", w.Msg)
			}
		}
		fmt.Fprintf(out, "%s: %d/%d tests passed\n", f, pass, len(results))
	}
	if failed {
		return exitError{1}
	}
	return nil
}

func writeFailure(w io.Writer, r policies.TestResult) {
	name := r.Case.Name
	if name == "" {
		name = r.Case.Line
	}
	fmt.Fprintf(w, "%s: FAIL %s\n", r.Case.Pos, name)
	fmt.Fprintf(w, "    request:  %s\n", r.Case.Line)
	want := r.Case.Expect.String()
	if r.Case.Rule != "" {
		want += " by " + r.Case.Rule
	}
	fmt.Fprintf(w, "    expected: %s\n", want)
	fmt.Fprintf(w, "    actual:   %s by %s — %s\n", verdictLine(r.Verdict), r.Verdict.Rule, r.Verdict.Reason)
	for _, p := range r.Problems {
		fmt.Fprintf(w, "    %s\n", p)
	}
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
