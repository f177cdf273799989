package audit

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"
)

// ReportSections are the ids of the HTML report's sections, in order:
// denials come first.
var ReportSections = []string{"sandbox", "denied", "flagged", "timeline", "commands", "network", "dns", "drops", "secrets", "packages", "files", "anchor"}

var reportFuncs = template.FuncMap{
	"verdict": func(v string) string {
		switch {
		case strings.Contains(v, "would deny"):
			return "v-audit"
		case v == "deny", v == "allow", v == "ask", v == "audit":
			return "v-" + v
		}
		return "v-none"
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"clock":   func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	"refused": refusedText,
	"bytes":   humanBytes,
	"ms":      humanMS,
	"exit": func(p *int) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprint(*p)
	},
	"exitClass": func(p *int) string {
		if p == nil {
			return "v-none"
		}
		if *p == 0 {
			return "v-allow"
		}
		return "v-deny"
	},
	"dash": func(s string) string {
		if s == "" {
			return "—"
		}
		return s
	},
	"wbr":       wbr,
	"clip":      clip,
	"shortRule": shortRule,
	"lines":     func(s string) int { return strings.Count(strings.TrimRight(s, "\n"), "\n") + 1 },
	"firstLine": func(s string) string {
		line, _, _ := strings.Cut(s, "\n")
		return clip(line, 90)
	},
}

// shortRule names a rule's file by its base name: the full path (often
// a temporary directory) is in the cell's title and in the JSONL.
func shortRule(rule string) string {
	name, pos, ok := strings.Cut(rule, " (")
	if !ok || !strings.HasSuffix(pos, ")") {
		return rule
	}
	pos = strings.TrimSuffix(pos, ")")
	if i := strings.LastIndexByte(pos, '/'); i >= 0 {
		pos = pos[i+1:]
	}
	return name + " (" + pos + ")"
}

// wbr escapes s and lets the browser break it only after a separator (.
// / - _ : @ = & ? [ , and spaces), never inside a label: a long host or
// rule wraps as pastebin.example.<wbr>test, not pastebin.example.c|om.
func wbr(s string) template.HTML {
	if s == "" {
		return "—"
	}
	var b strings.Builder
	for _, r := range s {
		b.WriteString(template.HTMLEscapeString(string(r)))
		if strings.ContainsRune("./-_:@=&?[,", r) {
			b.WriteString("<wbr>")
		}
	}
	return template.HTML(b.String())
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func humanMS(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return (time.Duration(ms) * time.Millisecond).Round(100 * time.Millisecond).String()
}

var reportTmpl = template.Must(template.New("report").Funcs(reportFuncs).Parse(reportHTML))

// HTML writes the report as one self-contained, printable HTML page (no
// scripts, no external assets).
func (r *Report) HTML(w io.Writer) error { return reportTmpl.Execute(w, r) }

const reportHTML = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Airlock review: {{.Sandbox}}</title>
<style>
:root{--fg:#111827;--muted:#6b7280;--line:#e5e7eb;--head:#f3f4f6}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);margin:0 auto;max-width:1180px;padding:24px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:0 0 8px;padding-bottom:4px;border-bottom:2px solid var(--line)}
.sub{color:var(--muted);margin:0 0 16px}
section{margin:0 0 22px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--head);font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code,.mono{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px;overflow-wrap:break-word;word-break:normal}
table.fixed{table-layout:fixed}
td.dest{min-width:15em}
.sev{display:inline-block;min-width:62px;text-align:center}
.sev-1{background:#7f1d1d;color:#fff}.sev-2{background:#fed7aa;color:#9a3412}.sev-3{background:#fee2e2;color:#991b1b}
.why{display:block;color:var(--muted);font-size:12px}
.attr{display:block;color:var(--muted);font-size:11px;font-style:italic}
details.detail{grid-column:1/-1}details.detail summary{cursor:pointer;color:var(--muted)}
details.detail pre{white-space:pre-wrap;font-size:12px;max-width:100%;margin:6px 0 0}
tr:target{outline:2px solid #2563eb}
.legend{display:flex;gap:16px;color:var(--muted);font-size:12px;margin:4px 0 0}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.badge{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px;font-weight:600;white-space:nowrap}
.v-deny{background:#fee2e2;color:#991b1b}
.v-allow{background:#dcfce7;color:#166534}
.v-audit{background:#fef3c7;color:#92400e}
.v-ask{background:#dbeafe;color:#1e40af}
.v-none{background:#f3f4f6;color:#374151}
#denied h2{color:#991b1b;border-color:#fecaca}
#flagged h2{color:#92400e;border-color:#fde68a}
.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:6px 18px;margin:0}
.facts div{display:flex;gap:8px}.facts dt{color:var(--muted);min-width:92px}.facts dd{margin:0}
.none{color:var(--muted);font-style:italic}
.warn{background:#fef3c7;border:1px solid #fde68a;padding:8px 12px;border-radius:6px;margin-bottom:16px}
.cat{margin:10px 0 4px;font-weight:600}
@media print{body{padding:0;max-width:none;font-size:11px}section{break-inside:auto}tr{break-inside:avoid}
 details.detail pre{display:block}
 h2{break-after:avoid}.badge{border:1px solid currentColor}*{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
</style></head><body>
<header>
<h1>Airlock review — sandbox <code>{{.Sandbox}}</code></h1>
<p class="sub">{{.Events}} events · generated {{ts .Generated}} · {{len .Denied}} denied destination(s) · {{len .Commands}} command(s){{with .Denied}}{{with index . 0}} · most serious: <b>{{.SeverityName}}</b> {{.Why}} (<code>{{.Host}}</code>){{end}}{{end}}</p>
{{range .Gaps}}<div class="warn">The audit pipeline dropped <b>{{.Dropped}}</b> events between {{ts .From}} and {{ts .To}}, while this sandbox ran: this record is incomplete for that interval.</div>{{end}}
{{range .Refused}}<div class="warn">{{refused .}}</div>{{end}}
</header>

<section id="sandbox"><h2>Sandbox</h2>
<dl class="facts">
<div><dt>Image</dt><dd><code>{{wbr .Image}}</code></dd></div>
<div><dt>Image ID</dt><dd><code>{{wbr .ImageID}}</code></dd></div>
<div><dt>Template</dt><dd>{{dash .Template}}</dd></div>
<div><dt>Policy</dt><dd>{{dash .Policy}}</dd></div>
<div><dt>Policy hash</dt><dd><code>{{wbr .PolicyHash}}</code></dd></div>
<div><dt>Address</dt><dd><code>{{dash .Address}}</code></dd></div>
<div><dt>Created</dt><dd>{{ts .Created}}</dd></div>
<div><dt>Ended</dt><dd>{{ts .Ended}}</dd></div>
<div><dt>State</dt><dd>{{dash .State}}</dd></div>
<div><dt>Exit status</dt><dd><span class="badge {{exitClass .ExitCode}}">{{exit .ExitCode}}</span></dd></div>
{{if .Detail}}<details class="detail"><summary>Detail: {{firstLine .Detail}} ({{lines .Detail}} line(s))</summary><pre>{{.Detail}}</pre></details>{{end}}
</dl></section>

<section id="denied"><h2>Denied ({{len .Denied}})</h2>
{{if .Denied}}<table class="fixed"><colgroup><col style="width:10%"><col style="width:19%"><col style="width:8%"><col style="width:9%"><col style="width:19%"><col style="width:16%"><col style="width:19%"></colgroup>
<tr><th>Severity</th><th>Destination</th><th>Attempts</th><th>First</th><th>Command</th><th>Rule</th><th>Reason and attempt</th></tr>
{{range $i, $d := .Denied}}<tr class="denial" id="denial-{{$i}}" data-severity="{{.Severity}}" data-host="{{.Host}}"><td><span class="badge sev sev-{{.Severity}}">{{.SeverityName}}</span><span class="why">{{.Why}}</span></td><td class="dest"><code>{{wbr .Host}}</code><span class="why">{{.Kind}}</span></td><td class="n">{{.Count}}</td><td>{{clock .First}}</td><td>{{if .CommandID}}<a class="cmd-link" href="#cmd-{{.CommandID}}" title="{{.Command}}"><code>{{wbr (clip .Command 80)}}</code></a><span class="attr">{{.Attribution}}</span>{{else}}<span class="none">no command running</span>{{end}}</td><td title="{{.Rule}}"><code>{{wbr (shortRule .Rule)}}</code></td><td>{{dash .Reason}}<span class="why mono">{{wbr .Detail}}</span></td></tr>
{{end}}</table>{{else}}<p class="none">Nothing was denied.</p>{{end}}</section>

<section id="flagged"><h2>Would be denied (audit mode) ({{len .Flagged}})</h2>
{{if .Flagged}}<table><tr><th>Destination</th><th>Kind</th><th>Count</th><th>Rule</th><th>Category</th><th>Attempt</th></tr>
{{range .Flagged}}<tr><td class="dest"><span class="badge v-audit">would deny</span> <code>{{wbr .Host}}</code></td><td>{{.Kind}}</td><td class="n">{{.Count}}</td><td title="{{.Rule}}"><code>{{wbr (shortRule .Rule)}}</code></td><td>{{dash .Category}}</td><td class="mono">{{wbr .Detail}}</td></tr>
{{end}}</table>{{else}}<p class="none">No audit-mode would-deny decisions.</p>{{end}}</section>

<section id="timeline"><h2>Timeline by category</h2>
{{if .Timeline.Rows}}{{.Timeline.SVG}}
<div class="legend"><span><i style="background:#16a34a"></i>allowed (above the line)</span><span><i style="background:#dc2626"></i>denied or would deny (below)</span><span>{{ts .Timeline.Start}} → {{ts .Timeline.End}}</span></div>
{{else}}<p class="none">No decisions recorded.</p>{{end}}</section>

<section id="commands"><h2>Commands ({{len .Commands}})</h2>
{{if .Commands}}<table><tr><th>Started</th><th>Command</th><th>Exit</th><th>Duration</th><th>Working dir</th></tr>
{{range .Commands}}<tr id="cmd-{{.ID}}"><td>{{clock .Start}}</td><td class="mono">{{wbr .Argv}}{{with .Record}}<br>shell session, record <code>{{.}}</code> (airlock sandbox artifacts){{end}}</td><td><span class="badge {{exitClass .ExitCode}}">{{exit .ExitCode}}{{if .TimedOut}} timed out{{end}}{{if .Killed}} killed{{end}}</span></td><td class="n">{{ms .DurationMS}}</td><td class="mono">{{dash .Cwd}}</td></tr>
{{end}}</table>{{else}}<p class="none">No commands recorded.</p>{{end}}</section>

<section id="network"><h2>Network by category</h2>
{{range .Network}}<div class="cat">{{.Category}}</div>
<table class="fixed"><colgroup><col style="width:40%"><col style="width:12%"><col style="width:12%"><col style="width:12%"><col style="width:12%"><col style="width:12%"></colgroup><tr><th>Destination</th><th>Connections</th><th>Requests</th><th>Bytes up</th><th>Bytes down</th><th>Would deny</th></tr>
{{range .Destinations}}<tr><td class="dest"><span class="badge {{if .WouldDeny}}v-audit{{else}}v-allow{{end}}">allow</span> <code>{{wbr .Host}}</code></td><td class="n">{{.Flows}}</td><td class="n">{{.Requests}}</td><td class="n">{{bytes .BytesUp}}</td><td class="n">{{bytes .BytesDown}}</td><td class="n">{{.WouldDeny}}</td></tr>
{{end}}</table>{{else}}<p class="none">No allowed connections.</p>{{end}}</section>

<section id="dns"><h2>DNS names ({{len .DNS}})</h2>
{{if .DNS}}<table><tr><th>Name</th><th>Verdict</th><th>Types</th><th>Queries</th><th>Answers</th></tr>
{{range .DNS}}<tr><td class="dest"><code>{{wbr .Name}}</code></td><td><span class="badge {{verdict .Verdict}}">{{dash .Verdict}}</span></td><td>{{.Types}}</td><td class="n">{{.Count}}</td><td class="mono">{{dash .Answers}}</td></tr>
{{end}}</table>{{else}}<p class="none">No DNS queries.</p>{{end}}</section>

<section id="drops"><h2>Kernel drops ({{len .Drops}})</h2>
{{if .Drops}}<table><tr><th>Protocol</th><th>Destination</th><th>Packets</th><th>Rule</th></tr>
{{range .Drops}}<tr><td><span class="badge v-deny">drop</span> {{.Protocol}}</td><td><code>{{.Dest}}</code></td><td class="n">{{.Count}}</td><td><code>{{dash .Rule}}</code></td></tr>
{{end}}</table>{{else}}<p class="none">No packets dropped.</p>{{end}}</section>

<section id="secrets"><h2>Secrets injected ({{len .Secrets}})</h2>
{{if .Secrets}}<table><tr><th>Secret (name only)</th><th>Toward</th><th>Requests</th></tr>
{{range .Secrets}}<tr><td><code>{{.Name}}</code></td><td><code>{{.Host}}</code></td><td class="n">{{.Count}}</td></tr>
{{end}}</table>{{else}}<p class="none">No secrets injected.</p>{{end}}</section>

<section id="packages"><h2>Packages fetched ({{len .Packages}})</h2>
{{if .Packages}}<table><tr><th>Ecosystem</th><th>Package</th><th>Version</th><th>From</th><th>Verdict</th><th>Why</th><th>Versions gated</th><th>Cache</th></tr>
{{range .Packages}}<tr><td>{{.Ecosystem}}</td><td><code>{{.Name}}</code></td><td>{{dash .Version}}</td><td><code>{{.Host}}</code></td><td><span class="badge {{verdict .Verdict}}">{{.Verdict}}</span></td><td>{{.Reason}}</td><td>{{range .Gated}}<div>{{.}}</div>{{end}}</td><td>{{dash .Cache}}</td></tr>
{{end}}</table>{{else}}<p class="none">No package downloads recognized.</p>{{end}}</section>

<section id="previews"><h2>Previews ({{len .Previews}})</h2>
{{if .Previews}}<table><tr><th>Preview</th><th>Port</th><th>Name</th><th>Exposed by</th><th>Opened by</th><th>Requests</th><th>Refused</th><th>Sent</th><th>State</th></tr>
{{range .Previews}}<tr><td><code>{{.ID}}</code></td><td class="n">{{.Port}}</td><td>{{dash .Name}}</td><td>{{.By}}</td><td>{{range .Opened}}<div>{{.}}</div>{{end}}</td><td class="n">{{.Requests}}</td><td class="n">{{.Refused}}</td><td class="n">{{bytes .BytesDown}}</td><td>{{.State}}</td></tr>
{{end}}</table>{{else}}<p class="none">No ports exposed.</p>{{end}}</section>

<section id="files"><h2>Files changed ({{len .Files}})</h2>
{{if .Files}}<table><tr><th>Change</th><th>Path</th><th>Size</th></tr>
{{range .Files}}<tr><td>{{.Op}}</td><td class="mono">{{.Path}}</td><td class="n">{{bytes .Size}}</td></tr>
{{end}}</table>{{else}}<p class="none">No file changes recorded.</p>{{end}}</section>

<section id="anchor"><h2>Hash-chain anchor</h2>
<dl class="facts">
<div><dt>Records</dt><dd>seq {{.Anchor.FirstSeq}} … {{.Anchor.LastSeq}}</dd></div>
<div><dt>Check</dt><dd>{{dash .Anchor.Checked}}</dd></div>
</dl>
<p>Final hash: <code>{{dash .Anchor.FinalHash}}</code></p>
<p class="sub">Verify the JSONL stream with <code>airlock logs verify FILE...</code>; the record with seq {{.Anchor.LastSeq}} must hash to this value.</p>
</section>
</body></html>
`
