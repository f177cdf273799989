package audit

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Markdown writes the report as Markdown (GitHub-style tables), in the
// same section order as the HTML.
func (r *Report) Markdown(w io.Writer) error {
	m := &mdWriter{}
	m.f("# Airlock review — sandbox `%s`\n\n", r.Sandbox)
	m.f("%d events · generated %s\n\n", r.Events, fmtTS(r.Generated))
	for _, g := range r.Gaps {
		m.f("> **Warning:** the audit pipeline dropped %d events between %s and %s while this sandbox ran.\n\n",
			g.Dropped, fmtTS(g.From), fmtTS(g.To))
	}
	for _, a := range r.Refused {
		m.f("> **Warning:** %s\n\n", refusedText(a))
	}
	m.sandbox(r)
	m.denials("Denied", r.Denied, "Nothing was denied.")
	m.denials("Would be denied (audit mode)", r.Flagged, "No audit-mode would-deny decisions.")
	m.commands(r.Commands)
	m.network(r.Network)
	m.dns(r.DNS)
	m.rest(r)
	_, err := io.WriteString(w, m.String())
	return err
}

type mdWriter struct{ strings.Builder }

func (m *mdWriter) f(format string, a ...any) { fmt.Fprintf(m, format, a...) }

// table writes a header and rows; cells are escaped for Markdown tables.
func (m *mdWriter) table(head []string, rows [][]string) {
	m.f("| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, r := range rows {
		for i := range r {
			r[i] = mdCell(r[i])
		}
		m.f("| %s |\n", strings.Join(r, " | "))
	}
	m.f("\n")
}

func mdCell(s string) string {
	if s == "" {
		return "—"
	}
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

func (m *mdWriter) section(title string, n int, empty string) bool {
	m.f("## %s\n\n", title)
	if n == 0 {
		m.f("_%s_\n\n", empty)
		return false
	}
	return true
}

func (m *mdWriter) sandbox(r *Report) {
	m.f("## Sandbox\n\n")
	m.table([]string{"Field", "Value"}, [][]string{
		{"Image", r.Image}, {"Image ID", r.ImageID}, {"Template", r.Template}, {"Policy", r.Policy}, {"Policy hash", r.PolicyHash}, {"Address", r.Address},
		{"Created", fmtTS(r.Created)}, {"Ended", fmtTS(r.Ended)}, {"State", r.State},
		{"Exit status", fmtExit(r.ExitCode)}, {"Detail", firstLineOf(r.Detail)},
	})
}

// firstLineOf is a multi-line detail's first line, marked as cut.
func firstLineOf(s string) string {
	line, rest, cut := strings.Cut(strings.TrimSpace(s), "\n")
	if cut && rest != "" {
		return line + " (…" + fmt.Sprint(strings.Count(rest, "\n")+1) + " more line(s); see --html)"
	}
	return line
}

func (m *mdWriter) denials(title string, ds []Denial, empty string) {
	if !m.section(fmt.Sprintf("%s (%d)", title, len(ds)), len(ds), empty) {
		return
	}
	var rows [][]string
	for _, d := range ds {
		cmd := "no command running"
		if d.CommandID != "" {
			cmd = "`" + d.Command + "` (" + d.Attribution + ")"
		}
		rows = append(rows, []string{d.SeverityName() + ": " + d.Why, "`" + d.Host + "`", string(d.Kind), fmt.Sprint(d.Count),
			cmd, shortRule(d.Rule), d.Reason, d.Detail})
	}
	m.table([]string{"Severity", "Destination", "Kind", "Attempts", "Command", "Rule", "Reason", "Attempt"}, rows)
}

func (m *mdWriter) commands(cs []Command) {
	if !m.section(fmt.Sprintf("Commands (%d)", len(cs)), len(cs), "No commands recorded.") {
		return
	}
	var rows [][]string
	for _, c := range cs {
		exit := fmtExit(c.ExitCode)
		if c.TimedOut {
			exit += " (timed out)"
		}
		cmd := "`" + c.Argv + "`"
		if c.Record != "" { // a relative link: report.md sits beside it among the artifacts
			cmd += fmt.Sprintf(" (shell session, record [%s](%s))", c.Record, c.Record)
		}
		rows = append(rows, []string{c.Start.UTC().Format("15:04:05.000"), cmd, exit, humanMS(c.DurationMS)})
	}
	m.table([]string{"Started", "Command", "Exit", "Duration"}, rows)
}

func (m *mdWriter) network(cats []CategoryTraffic) {
	if !m.section("Network by category", len(cats), "No allowed connections.") {
		return
	}
	for _, c := range cats {
		m.f("### %s\n\n", c.Category)
		var rows [][]string
		for _, d := range c.Destinations {
			rows = append(rows, []string{"`" + d.Host + "`", fmt.Sprint(d.Flows), fmt.Sprint(d.Requests),
				humanBytes(d.BytesUp), humanBytes(d.BytesDown), fmt.Sprint(d.WouldDeny)})
		}
		m.table([]string{"Destination", "Connections", "Requests", "Bytes up", "Bytes down", "Would deny"}, rows)
	}
}

func (m *mdWriter) dns(names []DNSName) {
	if !m.section(fmt.Sprintf("DNS names (%d)", len(names)), len(names), "No DNS queries.") {
		return
	}
	var rows [][]string
	for _, n := range names {
		rows = append(rows, []string{"`" + n.Name + "`", n.Verdict, n.Types, fmt.Sprint(n.Count), n.Answers})
	}
	m.table([]string{"Name", "Verdict", "Types", "Queries", "Answers"}, rows)
}

func (m *mdWriter) rest(r *Report) {
	if m.section(fmt.Sprintf("Kernel drops (%d)", len(r.Drops)), len(r.Drops), "No packets dropped.") {
		var rows [][]string
		for _, d := range r.Drops {
			rows = append(rows, []string{d.Protocol, "`" + d.Dest + "`", fmt.Sprint(d.Count), d.Rule})
		}
		m.table([]string{"Protocol", "Destination", "Packets", "Rule"}, rows)
	}
	if m.section(fmt.Sprintf("Secrets injected (%d)", len(r.Secrets)), len(r.Secrets), "No secrets injected.") {
		var rows [][]string
		for _, s := range r.Secrets {
			rows = append(rows, []string{"`" + s.Name + "`", "`" + s.Host + "`", fmt.Sprint(s.Count)})
		}
		m.table([]string{"Secret (name only)", "Toward", "Requests"}, rows)
	}
	if m.section(fmt.Sprintf("Packages fetched (%d)", len(r.Packages)), len(r.Packages), "No package downloads recognized.") {
		var rows [][]string
		for _, p := range r.Packages {
			rows = append(rows, []string{p.Ecosystem, "`" + p.Name + "`", p.Version, "`" + p.Host + "`", p.Verdict, p.Reason, strings.Join(p.Gated, "; "), p.Cache})
		}
		m.table([]string{"Ecosystem", "Package", "Version", "From", "Verdict", "Why", "Versions gated", "Cache"}, rows)
	}
	m.previews(r)
	if m.section(fmt.Sprintf("Files changed (%d)", len(r.Files)), len(r.Files), "No file changes recorded.") {
		var rows [][]string
		for _, f := range r.Files {
			rows = append(rows, []string{f.Op, "`" + f.Path + "`", humanBytes(f.Size)})
		}
		m.table([]string{"Change", "Path", "Size"}, rows)
	}
	m.f("## Hash-chain anchor\n\n")
	m.table([]string{"Records", "Final hash", "Check"}, [][]string{{
		fmt.Sprintf("seq %d … %d", r.Anchor.FirstSeq, r.Anchor.LastSeq), "`" + r.Anchor.FinalHash + "`", r.Anchor.Checked}})
}

func fmtTS(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func fmtExit(p *int) string {
	if p == nil {
		return ""
	}
	return fmt.Sprint(*p)
}

// refusedText says which record of the sandbox the store never got, and
// where it is instead.
func refusedText(a AuditError) string {
	what := fmt.Sprintf("the store refused this sandbox's %s record seq %d for good (%s)", a.RecordKind, a.Seq, a.Reason)
	if a.Sink == "pipeline" {
		what = fmt.Sprintf("a %s record of this sandbox could not be encoded (%s)", a.RecordKind, a.Error)
	}
	if a.DeadLetter != "" {
		return what + ": it is not in this report; the dead-letter file " + a.DeadLetter + " has it."
	}
	return what + ": it is not in this report, and the dead-letter file could not be written (the appliance's log names it)."
}
