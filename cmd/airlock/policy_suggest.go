//go:build !airlock_thin

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"airlock/audit"
	"airlock/internal/safefile"
	"airlock/policies"
)

func newPolicySuggestCmd() *cobra.Command {
	var f logFilter
	var outFile, source string
	var opt audit.SuggestOptions
	cmd := &cobra.Command{
		Use:   "suggest --sandbox ID | --since TIME [--until TIME] [--policy FILE]",
		Short: "Suggest a minimal policy from recorded traffic (run the sandbox in audit mode first)",
		Long: `Write a minimal TOML policy that allows what a sandbox was let through, from
the events recorded in the store: exact host names grouped by the category
that decided them (or by the kind their traffic shows: registries, git,
public_web), only the methods, ports and DNS types seen, with comments citing
the evidence (counts, sample requests, packages, times), and [[tests]] for
every request it allows and refuses.

What an enforcing rule refused stays refused, without dropping the host's
other requests. Two kinds of request are refused too unless a flag says
otherwise, because allowing them is a decision, not a recording:

  --allow-would-deny       requests an audit-mode policy would have denied
  --allow-internal-addrs   non-public addresses (private, link-local, the
                           metadata service, loopback) no category names

With --policy (the policy the traffic was recorded under), its [deny] and
[dns] sections are kept, and each of its categories that decided traffic is
kept whole (kind, action, methods, routes, paths, inject, packages) with its
hosts narrowed to the names seen.

The output passes 'airlock policy check --strict' and 'airlock policy test';
review it before use.

  airlock policy suggest --sandbox sb-1 --policy agent.toml > suggested.toml
  airlock policy suggest --since 24h --allow-would-deny -o agent.toml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPolicySuggest(cmd.Context(), cmd.OutOrStdout(), &f, outFile, source, opt)
		},
	}
	f.addStateDir(cmd.Flags())
	cmd.Flags().StringVar(&f.sandbox, "sandbox", "", "the sandbox whose traffic to allow")
	cmd.Flags().StringVar(&f.since, "since", "", "traffic from this time: a duration back (24h, 7d) or an RFC 3339 timestamp")
	cmd.Flags().StringVar(&f.until, "until", "", "traffic before this time")
	cmd.Flags().StringVarP(&outFile, "output", "o", "", "write the policy to this file instead of stdout")
	cmd.Flags().StringVar(&source, "policy", "", "the policy the traffic was recorded under: keep its [deny], [dns] and categories")
	cmd.Flags().BoolVar(&opt.AllowWouldDeny, "allow-would-deny", false, "allow requests the policy would have denied (audit mode): each is an egress path nobody reviewed")
	cmd.Flags().BoolVar(&opt.AllowInternal, "allow-internal-addrs", false, "allow non-public addresses seen (private, link-local, metadata, loopback)")
	return cmd
}

func runPolicySuggest(ctx context.Context, out io.Writer, f *logFilter, outFile, source string, opt audit.SuggestOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.sandbox == "" && f.since == "" {
		return usagef("say whose traffic: --sandbox ID, or a time range with --since (and --until)")
	}
	q, err := f.query(time.Now())
	if err != nil {
		return err
	}
	if source != "" {
		if opt.SourceText, err = safefile.Read(source, policies.MaxPolicySize); err != nil {
			return fmt.Errorf("--policy: %w", err)
		}
		if opt.Source, err = policies.Parse(source, opt.SourceText); err != nil {
			return fmt.Errorf("--policy %s does not load:\n%w", source, err)
		}
		if w := opt.Source.Warnings(); len(w) > 0 {
			return fmt.Errorf("--policy %s has warnings, and its rules would be copied; fix them first (policy check --strict):\n%w", source, w)
		}
	}
	st, err := f.open()
	if err != nil {
		return err
	}
	defer st.Close()
	text, err := audit.Suggest(ctx, st, q, opt) // checked: loads without warnings, its tests pass
	if err != nil {
		return err
	}
	if outFile == "" {
		_, err = io.WriteString(out, text)
		return err
	}
	return writeFileAtomic(outFile, func(w io.Writer) error { _, err := io.WriteString(w, text); return err })
}

func newPolicyReplayCmd() *cobra.Command {
	var f logFilter
	var baseline string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "replay POLICY --since 24h",
		Short: "Decide recorded requests again under a candidate policy and show what changes",
		Long: `Re-decide the recorded DNS queries, connections and HTTP requests under a
candidate policy and print what it would newly deny and newly allow compared
with the recorded verdicts (or, with --baseline, with another policy's
verdicts on the same requests). A would-deny in audit mode counts as denied.
Identical requests are grouped with a count.

Exit status: 0 nothing changed, 1 something changed (use it as a CI check on
a policy change), 2 the policy does not load or the arguments are wrong.

  airlock policy replay new.toml --since 24h
  airlock policy replay new.toml --baseline current.toml --since 7d --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicyReplay(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), &f, args[0], baseline, asJSON)
		},
	}
	f.addFlags(cmd.Flags())
	cmd.Flags().StringVar(&baseline, "baseline", "", "compare with this policy's verdicts instead of the recorded ones")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as one JSON object")
	return cmd
}

func init() {
	policyCmd.AddCommand(newPolicySuggestCmd(), newPolicyReplayCmd())
}

func loadForReplay(errw io.Writer, path string) (*policies.Policy, error) {
	p, err := policies.Load(path)
	if err != nil {
		printLoadError(errw, err)
		return nil, exitError{2}
	}
	return p, nil
}

func runPolicyReplay(ctx context.Context, out, errw io.Writer, f *logFilter, file, baseline string, asJSON bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	q, err := f.query(time.Now())
	if err != nil {
		fmt.Fprintln(errw, "airlock:", err)
		return exitError{2}
	}
	cand, err := loadForReplay(errw, file)
	if err != nil {
		return err
	}
	var base *policies.Policy
	if baseline != "" {
		if base, err = loadForReplay(errw, baseline); err != nil {
			return err
		}
	}
	st, err := f.open()
	if err != nil {
		fmt.Fprintln(errw, "airlock:", err)
		return exitError{2}
	}
	defer st.Close()
	res, err := audit.Replay(ctx, st, q, cand, base)
	if err != nil {
		return err
	}
	if asJSON {
		err = json.NewEncoder(out).Encode(res)
	} else {
		err = printReplay(out, res, file, baseline)
	}
	if err != nil {
		return err
	}
	if res.Changed() {
		return exitError{1}
	}
	return nil
}

func printReplay(w io.Writer, res *audit.ReplayResult, file, baseline string) error {
	against := "the recorded verdicts"
	if baseline != "" {
		against = baseline
	}
	fmt.Fprintf(w, "replayed %d recorded requests under %s, compared with %s\n", res.Decided, file, against)
	for _, sec := range []struct {
		title string
		list  []audit.Change
	}{{"NEWLY DENIED", res.NewlyDenied}, {"NEWLY ALLOWED", res.NewlyAllowed}, {"OTHER CHANGES (ask)", res.NewlyAsked}} {
		if len(sec.list) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%d)\n", sec.title, len(sec.list))
		rows := [][]string{{"REQUEST", "COUNT", "SANDBOXES", "NOW", "RULE", "REASON", "WAS"}}
		for _, c := range sec.list {
			rows = append(rows, []string{c.Request, fmt.Sprint(c.Count), dash(strings.Join(c.Sandboxes, ",")),
				string(c.New), dash(c.NewRule), dash(c.NewReason), string(c.Old) + " by " + dash(c.OldRule)})
		}
		if err := writeTable(w, rows, new([]int)); err != nil {
			return err
		}
	}
	if !res.Changed() {
		fmt.Fprintln(w, "no change")
	}
	return nil
}
