package audit

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// ErrNoEvents means the store holds no record of the sandbox.
var ErrNoEvents = errors.New("audit: no events recorded for this sandbox")

// Report is everything a reviewer needs about one sandbox, gathered from
// the store. HTML and Markdown render it.
type Report struct {
	Sandbox   string
	Generated time.Time
	Events    int

	Image, Policy, PolicyHash, Address string
	ImageID, Template                  string // the environment version: image digest, template NAME:vN
	Created, Ended                     time.Time
	State                              string // the last lifecycle record's state (an older record's: its stage)
	ExitCode                           *int
	Detail                             string

	Denied   []Denial  // denials first: what the sandbox was refused
	Flagged  []Denial  // allowed in audit mode but would have been denied
	Commands []Command // the timeline
	Network  []CategoryTraffic
	DNS      []DNSName
	Drops    []DropRow
	Secrets  []SecretUse
	Packages []PackageUse
	Previews []PreviewRow // ingress: the sandbox's exposed ports
	Files    []FileChange
	Gaps     []Gap // events the pipeline dropped while the sandbox ran
	// Refused are the sandbox's records the store never got: refused for
	// good or not encodable (audit_error), kept in the dead-letter file.
	Refused  []AuditError
	Anchor   Anchor
	Timeline Timeline // allowed and denied decisions per category over time
}

// Denial is one refused (or would-be refused) destination and the rule.
type Denial struct {
	Kind     Kind
	Host     string
	Detail   string // a sample of what was attempted
	Rule     string
	Reason   string
	Category string
	Count    int
	First    time.Time
	// Severity ranks it (SevCritical first) and Why says what makes it so.
	Severity int
	Why      string
	// The command it is linked to (CommandID is the command's id in
	// Report.Commands) and how: AttrExecID when an attempt's event names
	// its command (exec_id), AttrAgentInferred when the sandbox's agent
	// inferred it, AttrRunning when only the times link them, "" when no
	// command was running.
	CommandID, Command, Attribution string
}

// SeverityName is the tier's label: critical, high or denied.
func (d Denial) SeverityName() string { return severityNames[d.Severity] }

// Command is one exec, its records joined by id.
type Command struct {
	ID         string
	Argv       string
	Cwd        string
	Start      time.Time
	DurationMS int64
	ExitCode   *int
	TimedOut   bool
	Killed     bool
	End        time.Time // when it finished; zero while it runs
	// Record is the artifact of a recorded shell session
	// (shells/EXEC_ID.jsonl), beside report.md among the artifacts.
	Record string
}

// CategoryTraffic is the allowed traffic of one category.
type CategoryTraffic struct {
	Category     string
	Destinations []Destination
}

// Destination is one allowed host with counts and bytes.
type Destination struct {
	Host      string
	Flows     int
	Requests  int
	BytesUp   int64
	BytesDown int64
	WouldDeny int
}

// DNSName is one name the sandbox looked up.
type DNSName struct {
	Name    string
	Types   string
	Count   int
	Verdict string
	Answers string
}

// DropRow is aggregated kernel drops to one destination.
type DropRow struct {
	Protocol string
	Dest     string
	Count    uint64
	Rule     string
}

// SecretUse is a secret injected toward a host (the name, never a value).
type SecretUse struct {
	Name  string
	Host  string
	Count int
}

// PackageUse is a package download or metadata request the proxy
// recognized: Reason says why it was denied (package_too_new,
// osv:MAL-…, install_script, …), Gated lists the versions the package
// gate hid from its metadata ("2.0.0: package_too_new …"). Cache is
// "hit" when the appliance's package cache served it, "miss" when it
// was fetched (and kept), "" when the cache is off.
type PackageUse struct {
	Ecosystem, Name, Version, Host, Verdict string
	Reason                                  string
	Published                               string
	Gated                                   []string
	Cache                                   string
}

// Anchor is the sandbox's place in the hash chain.
type Anchor struct {
	FirstSeq, LastSeq uint64
	FinalHash         string
	// Checked is "match" when the store's record LastSeq hashes to the
	// FinalHash of the sandbox's end record, "mismatch" when not; without
	// an end record the anchor is the chain so far, and Checked says so.
	Checked string
}

// BuildReport gathers the report for a sandbox from the store.
func BuildReport(ctx context.Context, st *Store, sandbox string) (*Report, error) {
	r := &Report{Sandbox: sandbox, Generated: time.Now().UTC()}
	b := newReportBuilder(r)
	err := st.Each(ctx, Query{Sandbox: sandbox}, func(e Event) error { b.add(&e); return nil })
	if err != nil {
		return nil, err
	}
	if r.Events == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoEvents, sandbox)
	}
	b.finish()
	if err := r.checkAnchor(ctx, st); err != nil {
		return nil, err
	}
	if err := r.findRefused(ctx, st, b.first); err != nil {
		return nil, err
	}
	return r, r.findGaps(ctx, st, b.first, b.last)
}

// findRefused finds the audit_error records, from the sandbox's first
// record on, about a record of the sandbox that is not in the store (the
// store refused it, or it could not be encoded; one only the stream
// refused is in the store).
func (r *Report) findRefused(ctx context.Context, st *Store, from time.Time) error {
	return st.Each(ctx, Query{Kind: KindAuditError, Since: from}, func(e Event) error {
		if a := e.AuditError; a != nil && a.RecordSandbox == r.Sandbox && a.Sink != "stream" {
			r.Refused = append(r.Refused, *a)
		}
		return nil
	})
}

func (r *Report) checkAnchor(ctx context.Context, st *Store) error {
	if r.Anchor.LastSeq == 0 {
		return nil
	}
	raw, err := st.Raw(ctx, r.Anchor.LastSeq)
	if r.Anchor.FinalHash == "" && err == nil {
		// No end record yet: anchor the chain so far.
		r.Anchor.FinalHash, r.Anchor.Checked = HashLine(raw), "no end record yet: the chain so far"
		return nil
	}
	if errors.Is(err, ErrNotStored) {
		r.Anchor.Checked = "record no longer stored"
		return nil
	}
	if err != nil {
		return err
	}
	r.Anchor.Checked = "mismatch"
	if HashLine(raw) == r.Anchor.FinalHash {
		r.Anchor.Checked = "match"
	}
	return nil
}

func (r *Report) findGaps(ctx context.Context, st *Store, from, to time.Time) error {
	q := Query{Kind: KindGap, Since: from}
	return st.Each(ctx, q, func(e Event) error {
		if e.Gap != nil && !e.Gap.From.After(to) {
			r.Gaps = append(r.Gaps, *e.Gap)
		}
		return nil
	})
}

// ErrNotStored means the record is not in the store (never, or pruned).
var ErrNotStored = errors.New("audit: record not stored")

// Raw returns the exact stored bytes of record seq (its JSONL line).
func (s *Store) Raw(ctx context.Context, seq uint64) ([]byte, error) {
	var raw []byte
	err := s.db.QueryRowContext(ctx, `SELECT raw FROM events WHERE seq = ?`, int64(seq)).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: seq %d", ErrNotStored, seq)
	}
	if err != nil {
		return nil, fmt.Errorf("audit: read seq %d: %w", seq, err)
	}
	return raw, nil
}

type reportBuilder struct {
	r           *Report
	first, last time.Time
	denied      map[string]*Denial
	flagged     map[string]*Denial
	cmds        map[string]*Command
	cmdOrder    []string
	dests       map[string]map[string]*Destination
	dns         map[string]*DNSName
	dnsTypes    map[string]map[string]bool
	drops       map[string]*DropRow
	secrets     map[string]*SecretUse
	pkgs        map[string]bool
	timeline    timelineBuilder
}

func newReportBuilder(r *Report) *reportBuilder {
	return &reportBuilder{r: r, denied: map[string]*Denial{}, flagged: map[string]*Denial{},
		cmds: map[string]*Command{}, dests: map[string]map[string]*Destination{},
		dns: map[string]*DNSName{}, dnsTypes: map[string]map[string]bool{},
		drops: map[string]*DropRow{}, secrets: map[string]*SecretUse{}, pkgs: map[string]bool{}}
}

func (b *reportBuilder) add(e *Event) {
	b.r.Events++
	if b.first.IsZero() {
		b.first = e.Time
	}
	b.last = e.Time
	if b.r.Anchor.FirstSeq == 0 {
		b.r.Anchor.FirstSeq = e.Seq
	}
	if b.r.Anchor.FinalHash == "" {
		b.r.Anchor.LastSeq = e.Seq
	}
	switch {
	case e.Lifecycle != nil:
		b.lifecycle(e)
	case e.Exec != nil:
		b.exec(e)
	case e.Drop != nil:
		b.drop(e)
		return
	case e.Preview != nil || e.Ingress != nil:
		b.preview(e)
		return
	}
	b.network(e)
}

func (b *reportBuilder) lifecycle(e *Event) {
	r, l := b.r, e.Lifecycle
	r.State = cmp.Or(string(l.State), l.Stage)
	setIf(&r.Image, l.Image)
	setIf(&r.ImageID, l.ImageID)
	setIf(&r.Template, l.Template)
	setIf(&r.Policy, l.Policy)
	setIf(&r.PolicyHash, l.PolicyHash)
	setIf(&r.Address, l.Address)
	setIf(&r.Detail, l.Detail)
	if r.Created.IsZero() {
		r.Created = e.Time
	}
	if l.ExitCode != nil {
		r.ExitCode = l.ExitCode
	}
	r.Files = append(r.Files, l.Changes...)
	if endsSandbox(e) {
		r.Ended = e.Time
		if l.FinalHash != "" {
			r.Anchor = Anchor{FirstSeq: l.FirstSeq, LastSeq: l.LastSeq, FinalHash: l.FinalHash}
		}
	}
}

func setIf(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

func (b *reportBuilder) exec(e *Event) {
	x := e.Exec
	id := e.ID
	if id == "" {
		id = fmt.Sprint("seq-", e.Seq)
	}
	c := b.cmds[id]
	if c == nil {
		c = &Command{ID: id, Argv: strings.Join(x.Argv, " "), Cwd: x.Cwd, Start: e.Time}
		b.cmds[id] = c
		b.cmdOrder = append(b.cmdOrder, id)
	}
	if x.Stage == "started" {
		c.Start = e.Time
	}
	setIf(&c.Record, x.Record)
	if x.Stage == "finished" {
		c.End = e.Time
		c.DurationMS, c.ExitCode, c.TimedOut, c.Killed = x.DurationMS, x.ExitCode, x.TimedOut, x.Killed
		if c.DurationMS == 0 {
			c.DurationMS = e.Time.Sub(c.Start).Milliseconds()
		}
	}
}

func (b *reportBuilder) drop(e *Event) {
	d := e.Drop
	key := d.Protocol + "|" + d.Dest + portSuffix(d.Port)
	row := b.drops[key]
	if row == nil {
		row = &DropRow{Protocol: d.Protocol, Dest: d.Dest + portSuffix(d.Port), Rule: e.Rule}
		b.drops[key] = row
	}
	row.Count += max(d.Count, 1)
	b.timeline.add(e)
	if sev, _ := rankDenial(e); sev == SevCritical {
		b.denial(b.denied, e, d.Dest+portSuffix(d.Port))
	}
}

func (b *reportBuilder) network(e *Event) {
	host := Host(e)
	if host == "" || e.Kind == KindApproval {
		return
	}
	b.timeline.add(e)
	if e.DNS != nil {
		b.dnsName(e, host)
	}
	if e.Verdict == "deny" {
		b.denial(b.denied, e, host)
		if e.HTTP != nil && e.HTTP.Package != nil {
			b.packageRow(e, host)
		}
		return
	}
	if e.WouldDeny {
		b.denial(b.flagged, e, host)
	}
	if e.HTTP != nil {
		b.httpExtras(e, host)
	}
	if e.Kind != KindFlow && e.Kind != KindHTTP {
		return
	}
	cat := e.Category
	if cat == "" {
		cat = "(none)"
	}
	if b.dests[cat] == nil {
		b.dests[cat] = map[string]*Destination{}
	}
	d := b.dests[cat][host]
	if d == nil {
		d = &Destination{Host: host}
		b.dests[cat][host] = d
	}
	b.count(d, e)
}

func (b *reportBuilder) count(d *Destination, e *Event) {
	switch {
	case e.Flow != nil && e.Flow.Stage == "close":
		d.BytesUp += e.Flow.BytesUp
		d.BytesDown += e.Flow.BytesDown
	case e.Flow != nil:
		d.Flows++
		if e.WouldDeny {
			d.WouldDeny++
		}
	case e.HTTP != nil:
		d.Requests++
		if e.WouldDeny {
			d.WouldDeny++
		}
	}
}

func (b *reportBuilder) denial(m map[string]*Denial, e *Event, host string) {
	key := string(e.Kind) + "|" + host + "|" + e.Rule
	d := m[key]
	if d == nil {
		d = &Denial{Kind: e.Kind, Host: host, Detail: Summary(e), Rule: e.Rule, Reason: e.Reason, Category: e.Category, First: e.Time}
		d.Severity, d.Why = rankDenial(e)
		m[key] = d
	}
	d.Count++
	if d.CommandID == "" && e.ExecID != "" {
		d.CommandID, d.Attribution = e.ExecID, AttrExecID
		if e.Attribution == AttrInferred {
			d.Attribution = AttrAgentInferred
		}
	}
	if sev, why := rankDenial(e); sev < d.Severity {
		d.Severity, d.Why = sev, why
	}
}

func (b *reportBuilder) dnsName(e *Event, name string) {
	n := b.dns[name]
	if n == nil {
		n = &DNSName{Name: name}
		b.dns[name] = n
		b.dnsTypes[name] = map[string]bool{}
	}
	n.Count++
	b.dnsTypes[name][e.DNS.QType] = true
	if n.Verdict == "" || e.Verdict == "deny" {
		n.Verdict = e.Verdict
	}
	if len(e.DNS.Answers) > 0 {
		n.Answers = strings.Join(e.DNS.Answers, ", ")
	}
}

func (b *reportBuilder) httpExtras(e *Event, host string) {
	for _, s := range e.HTTP.Injected {
		key := s + "|" + host
		if b.secrets[key] == nil {
			b.secrets[key] = &SecretUse{Name: s, Host: host}
		}
		b.secrets[key].Count++
	}
	if e.HTTP.Package != nil {
		b.packageRow(e, host)
	}
}

// packageRow adds a package's first request to the package table, a
// denied one too: the table says what was refused and why.
func (b *reportBuilder) packageRow(e *Event, host string) {
	p := e.HTTP.Package
	key := p.Ecosystem + "|" + p.Name + "|" + p.Version
	if !b.pkgs[key] {
		b.pkgs[key] = true
		b.r.Packages = append(b.r.Packages, packageUse(e, p, host))
	}
}

func packageUse(e *Event, p *Package, host string) PackageUse {
	u := PackageUse{Ecosystem: p.Ecosystem, Name: p.Name, Version: p.Version, Host: host, Verdict: verdictLabel(e), Published: p.Published, Cache: p.Cache}
	if e.Verdict == "deny" || e.WouldDeny {
		u.Reason = e.Reason
	}
	for _, g := range p.Gated {
		u.Gated = append(u.Gated, g.Version+": "+g.Reason)
	}
	if n := p.GatedTotal - len(p.Gated); n > 0 {
		u.Gated = append(u.Gated, fmt.Sprintf("and %d more", n))
	}
	return u
}

func verdictLabel(e *Event) string {
	if e.WouldDeny {
		return e.Verdict + " (would deny)"
	}
	return e.Verdict
}

// finish turns the maps into sorted lists.
func (b *reportBuilder) finish() {
	r := b.r
	r.Denied, r.Flagged = sortedDenials(b.denied), sortedDenials(b.flagged)
	for _, id := range b.cmdOrder {
		r.Commands = append(r.Commands, *b.cmds[id])
	}
	end := r.Ended
	if end.IsZero() {
		end = b.last
	}
	attribute(r.Denied, r.Commands, end)
	attribute(r.Flagged, r.Commands, end)
	start := r.Created
	if start.IsZero() || b.first.Before(start) {
		start = b.first
	}
	r.Timeline = b.timeline.build(start, end)
	for cat, m := range b.dests {
		ct := CategoryTraffic{Category: cat}
		for _, d := range m {
			ct.Destinations = append(ct.Destinations, *d)
		}
		sort.Slice(ct.Destinations, func(i, j int) bool { return ct.Destinations[i].Host < ct.Destinations[j].Host })
		r.Network = append(r.Network, ct)
	}
	sort.Slice(r.Network, func(i, j int) bool { return r.Network[i].Category < r.Network[j].Category })
	for name, n := range b.dns {
		n.Types = strings.Join(slices.Sorted(maps.Keys(b.dnsTypes[name])), ",")
		r.DNS = append(r.DNS, *n)
	}
	sort.Slice(r.DNS, func(i, j int) bool { return r.DNS[i].Name < r.DNS[j].Name })
	for _, d := range b.drops {
		r.Drops = append(r.Drops, *d)
	}
	sort.Slice(r.Drops, func(i, j int) bool { return r.Drops[i].Count > r.Drops[j].Count })
	for _, s := range b.secrets {
		r.Secrets = append(r.Secrets, *s)
	}
	sort.Slice(r.Secrets, func(i, j int) bool { return r.Secrets[i].Name+r.Secrets[i].Host < r.Secrets[j].Name+r.Secrets[j].Host })
}

func sortedDenials(m map[string]*Denial) []Denial {
	out := make([]Denial, 0, len(m))
	for _, d := range m {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].First.Before(out[j].First) })
	sortDenials(out)
	return out
}
