package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"airlock/audit"
)

const defaultStateDir = "/var/lib/airlock"

// logFilter is the filter flags shared by `logs`, `logs top`, `report`
// and `policy suggest/replay`.
type logFilter struct {
	stateDir string
	sandbox  string
	kind     string
	verdict  string
	category string
	rule     string
	host     string
	since    string
	until    string
}

func (f *logFilter) addStateDir(fs *pflag.FlagSet) {
	fs.StringVar(&f.stateDir, "state-dir", defaultStateDir, "state directory holding the event store ("+audit.StoreFile+")")
}

func (f *logFilter) addFlags(fs *pflag.FlagSet) {
	f.addStateDir(fs)
	fs.StringVar(&f.sandbox, "sandbox", "", "only this sandbox id")
	fs.StringVar(&f.kind, "kind", "", "only this kind: dns, flow, http, drop, exec, lifecycle, policy, approval, gap, secret_reflected")
	fs.StringVar(&f.verdict, "verdict", "", "only this verdict: allow, deny, ask, audit, or would_deny")
	fs.StringVar(&f.category, "category", "", "only decisions by this category")
	fs.StringVar(&f.rule, "rule", "", "only decisions by this rule name (e.g. deny.hosts[0])")
	fs.StringVar(&f.host, "host", "", "only destinations matching this glob (e.g. '*.example.test')")
	fs.StringVar(&f.since, "since", "", "from this time: a duration back (24h, 90m, 7d) or an RFC 3339 timestamp")
	fs.StringVar(&f.until, "until", "", "before this time: a duration back or an RFC 3339 timestamp")
}

var kinds = map[string]bool{"dns": true, "flow": true, "http": true, "drop": true, "exec": true,
	"lifecycle": true, "policy": true, "approval": true, "gap": true, "secret_reflected": true}

var verdicts = map[string]bool{"allow": true, "deny": true, "ask": true, "audit": true, "would_deny": true, "would-deny": true}

// query turns the flags into a store query, with precise errors.
func (f *logFilter) query(now time.Time) (audit.Query, error) {
	q := audit.Query{Sandbox: f.sandbox, Kind: audit.Kind(f.kind), Verdict: f.verdict,
		Category: f.category, Rule: f.rule, Host: f.host}
	if f.kind != "" && !kinds[f.kind] {
		return q, fmt.Errorf("--kind %q: want one of dns, flow, http, drop, exec, lifecycle, policy, approval, gap, secret_reflected", f.kind)
	}
	if f.verdict != "" && !verdicts[strings.ToLower(f.verdict)] {
		return q, fmt.Errorf("--verdict %q: want allow, deny, ask, audit or would_deny", f.verdict)
	}
	var err error
	if q.Since, err = audit.ParseTime(f.since, now); err != nil {
		return q, fmt.Errorf("--since: %w", err)
	}
	if q.Until, err = audit.ParseTime(f.until, now); err != nil {
		return q, fmt.Errorf("--until: %w", err)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return q, fmt.Errorf("--until (%s) is not after --since (%s)", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	}
	return q, nil
}

func (f *logFilter) open() (*audit.Store, error) {
	st, err := audit.OpenStoreReadOnly(filepath.Join(f.stateDir, audit.StoreFile))
	if err != nil {
		return nil, fmt.Errorf("%w (is --state-dir right? airlock serve writes it)", err)
	}
	return st, nil
}

type logsOptions struct {
	logFilter
	json   bool
	follow bool
	limit  int
	poll   time.Duration
}

func newLogsCmd() *cobra.Command {
	var o logsOptions
	cmd := &cobra.Command{
		Use:   "logs",
		Short: "Query the audit log: DNS, flows, requests, drops, commands",
		Long: `Print recorded audit events from the store in the state directory, oldest
first, as an aligned table or (--json) as JSON Lines in the stream's schema
(docs/events.md). Filters combine with AND.

  airlock logs --sandbox sb-1 --verdict deny --since 24h
  airlock logs --host '*.example.test' --kind http --json
  airlock logs --follow                 keep printing new events
  airlock logs top                      top destinations and denials
  airlock logs verify events.jsonl*     check the JSONL hash chain`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLogs(cmd.Context(), cmd.OutOrStdout(), &o)
		},
	}
	o.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON Lines instead of a table")
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "after the matching events, keep printing new ones until interrupted")
	cmd.Flags().IntVarP(&o.limit, "limit", "n", 0, "print only the newest N matching events (default all; 20 with --follow)")
	cmd.Flags().DurationVar(&o.poll, "poll", 250*time.Millisecond, "how often --follow checks for new events")
	cmd.AddCommand(newLogsTopCmd(), newLogsVerifyCmd())
	return cmd
}

func init() { rootCmd.AddCommand(newLogsCmd()) }

func runLogs(ctx context.Context, out io.Writer, o *logsOptions) error {
	q, err := o.query(time.Now())
	if err != nil {
		return err
	}
	st, err := o.open()
	if err != nil {
		return err
	}
	defer st.Close()
	if ctx == nil {
		ctx = context.Background()
	}
	q.Limit, q.Newest = o.limit, o.limit > 0
	if o.follow && o.limit == 0 {
		q.Limit, q.Newest = 20, true
	}
	pr := newEventPrinter(out, o.json)
	// Snapshot the newest seq first: what follows is everything after it.
	if q.UpToSeq, err = st.MaxSeq(ctx); err != nil {
		return err
	}
	var evs []audit.Event
	if q.UpToSeq > 0 { // else the store is empty (and 0 would mean no bound)
		if evs, err = st.Query(ctx, q); err != nil {
			return err
		}
	}
	if err := pr.print(evs...); err != nil || !o.follow {
		return err
	}
	q.AfterSeq = q.UpToSeq
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return st.Follow(ctx, q, o.poll, func(e audit.Event) error { return pr.print(e) })
}

// eventPrinter prints events as JSON Lines or an aligned table. A table's
// column widths come from the first rows and grow when a later row needs it.
type eventPrinter struct {
	w       io.Writer
	json    bool
	enc     *json.Encoder
	widths  []int
	headers bool
}

var tableHeader = []string{"TIME", "SANDBOX", "KIND", "VERDICT", "CATEGORY", "RULE", "DETAIL"}

func newEventPrinter(w io.Writer, asJSON bool) *eventPrinter {
	return &eventPrinter{w: w, json: asJSON, enc: json.NewEncoder(w)}
}

func (p *eventPrinter) print(evs ...audit.Event) error {
	if p.json {
		for i := range evs {
			if err := p.enc.Encode(&evs[i]); err != nil {
				return err
			}
		}
		return nil
	}
	rows := make([][]string, 0, len(evs)+1)
	if !p.headers {
		rows = append(rows, tableHeader)
		p.headers = true
	}
	for i := range evs {
		rows = append(rows, eventRow(&evs[i]))
	}
	return writeTable(p.w, rows, &p.widths)
}

func eventRow(e *audit.Event) []string {
	verdict := e.Verdict
	if e.WouldDeny {
		verdict += " (would deny)"
	}
	return []string{e.Time.UTC().Format("2006-01-02T15:04:05.000Z"), dash(e.Sandbox), string(e.Kind),
		dash(verdict), dash(e.Category), dash(e.Rule), audit.Summary(e)}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeTable prints rows with columns padded to *widths, which it grows to
// fit; the last column is never padded.
func writeTable(w io.Writer, rows [][]string, widths *[]int) error {
	for _, r := range rows {
		for i, c := range r {
			if i >= len(*widths) {
				*widths = append(*widths, 0)
			}
			(*widths)[i] = max((*widths)[i], len(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r {
			if i == len(r)-1 {
				b.WriteString(c)
				break
			}
			fmt.Fprintf(&b, "%-*s  ", (*widths)[i], c)
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func newLogsTopCmd() *cobra.Command {
	var f logFilter
	var n int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show the top destinations and the top denials",
		Long: `Rank destinations by how many events name them (with denials, sandboxes and
bytes each way) and denied destinations by the rule that denied them. The
filters of 'airlock logs' apply.

  airlock logs top --since 24h -n 20
  airlock logs top --sandbox sb-1 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLogsTop(cmd.Context(), cmd.OutOrStdout(), &f, n, asJSON)
		},
	}
	f.addFlags(cmd.Flags())
	cmd.Flags().IntVarP(&n, "top", "n", 10, "rows in each list")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object {destinations, denials}")
	return cmd
}

func runLogsTop(ctx context.Context, out io.Writer, f *logFilter, n int, asJSON bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	q, err := f.query(time.Now())
	if err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("-n %d: want at least 1", n)
	}
	st, err := f.open()
	if err != nil {
		return err
	}
	defer st.Close()
	dest, err := st.TopDestinations(ctx, q, n)
	if err != nil {
		return err
	}
	den, err := st.TopDenials(ctx, q, n)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(out).Encode(map[string][]audit.TopRow{"destinations": nonNil(dest), "denials": nonNil(den)})
	}
	rows := [][]string{{"HOST", "CATEGORY", "EVENTS", "DENIED", "SANDBOXES", "BYTES UP", "BYTES DOWN"}}
	for _, r := range dest {
		rows = append(rows, []string{r.Host, dash(r.Category), fmt.Sprint(r.Count), fmt.Sprint(r.Denied),
			fmt.Sprint(r.Sandboxes), fmt.Sprint(r.BytesUp), fmt.Sprint(r.BytesDown)})
	}
	fmt.Fprintln(out, "TOP DESTINATIONS")
	if err := writeTable(out, rows, new([]int)); err != nil {
		return err
	}
	rows = [][]string{{"HOST", "EVENTS", "SANDBOXES", "RULE"}}
	for _, r := range den {
		rows = append(rows, []string{r.Host, fmt.Sprint(r.Count), fmt.Sprint(r.Sandboxes), dash(r.Rule)})
	}
	fmt.Fprintln(out, "\nTOP DENIALS")
	return writeTable(out, rows, new([]int))
}

func nonNil(r []audit.TopRow) []audit.TopRow {
	if r == nil {
		return []audit.TopRow{}
	}
	return r
}

func newLogsVerifyCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify FILE...",
		Short: "Check the hash chain of JSONL stream files, across rotations",
		Long: `Check that JSONL stream files form one unbroken hash chain. Files may be given
in any order (rotated files are ordered by their first seq). Every break is
printed as file:line: kind: message, where kind is modified (a line was
edited), deleted (records are missing), reordered, duplicated or invalid.
Exits 1 if the chain is broken. The last record has no successor to vouch
for it: compare the printed final hash with the sandbox's lifecycle anchor.

  airlock logs verify /var/log/airlock/events.jsonl*`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON {
				return runLogsVerifyJSON(cmd.OutOrStdout(), args)
			}
			return runLogsVerify(cmd.OutOrStdout(), args)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as one JSON object (see docs/events.md)")
	return cmd
}

func runLogsVerify(out io.Writer, files []string) error {
	res, err := audit.Verify(files...)
	if err != nil {
		return err
	}
	for _, p := range res.Problems {
		fmt.Fprintln(out, p.String())
	}
	for _, n := range res.Notes {
		fmt.Fprintln(out, "note:", n)
	}
	if !res.OK() {
		fmt.Fprintf(out, "BROKEN: %d problem(s) in %d records across %d file(s)\n", len(res.Problems), res.Records, res.Files)
		return exitError{1}
	}
	if res.Records == 0 {
		fmt.Fprintf(out, "ok: no records in %d file(s)\n", res.Files)
		return nil
	}
	fmt.Fprintf(out, "ok: %d records in %d file(s), seq %d..%d, final hash %s\n",
		res.Records, res.Files, res.FirstSeq, res.LastSeq, res.FinalHash)
	return nil
}
