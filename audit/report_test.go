package audit

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func sampleReport(t *testing.T) *Report {
	t.Helper()
	st := sampleStore(t)
	r, err := BuildReport(context.Background(), st, "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestBuildReport(t *testing.T) {
	r := sampleReport(t)
	if r.Image != "airlock/agent:1" || r.Policy != "coding-agent" || r.State != "destroyed" || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Errorf("sandbox facts: %+v", r)
	}
	var denied []string
	for _, d := range r.Denied {
		denied = append(denied, d.Host+" "+d.Rule)
	}
	want := []string{"evil.example.test default", "paste.example.test deny.hosts[0] (p.toml:20:9)"}
	if d := cmp.Diff(want, denied); d != "" {
		t.Errorf("denied (-want +got):\n%s", d)
	}
	if len(r.Flagged) != 1 || r.Flagged[0].Host != "docs.example.test" {
		t.Errorf("flagged: %+v", r.Flagged)
	}
	if len(r.Commands) != 1 || r.Commands[0].Argv != "npm install" || r.Commands[0].DurationMS != 3100 || *r.Commands[0].ExitCode != 0 {
		t.Errorf("commands: %+v", r.Commands)
	}
	wantNet := []CategoryTraffic{
		{Category: "docs", Destinations: []Destination{{Host: "docs.example.test", Requests: 1, WouldDeny: 1}}},
		{Category: "registries", Destinations: []Destination{{Host: "registry.example.test", Flows: 1, Requests: 1, BytesUp: 800, BytesDown: 5000}}},
	}
	if d := cmp.Diff(wantNet, r.Network); d != "" {
		t.Errorf("network (-want +got):\n%s", d)
	}
	if len(r.DNS) != 2 || r.DNS[0].Name != "evil.example.test" || r.DNS[0].Verdict != "deny" {
		t.Errorf("dns: %+v", r.DNS)
	}
	if len(r.Drops) != 1 || r.Drops[0].Count != 3 || r.Drops[0].Dest != "198.18.5.5:123" {
		t.Errorf("drops: %+v", r.Drops)
	}
	if len(r.Secrets) != 1 || r.Secrets[0] != (SecretUse{"registry-token", "registry.example.test", 1}) {
		t.Errorf("secrets: %+v", r.Secrets)
	}
	if len(r.Packages) != 1 || r.Packages[0].Name != "left-pad" || len(r.Files) != 1 {
		t.Errorf("packages %+v files %+v", r.Packages, r.Files)
	}
	if r.Anchor.Checked != "match" || r.Anchor.FirstSeq != 2 || r.Anchor.LastSeq != 13 || len(r.Anchor.FinalHash) != 64 {
		t.Errorf("anchor: %+v", r.Anchor)
	}
	if len(r.Gaps) != 1 || r.Gaps[0].Dropped != 7 {
		t.Errorf("gaps: %+v", r.Gaps)
	}
	if _, err := BuildReport(context.Background(), sampleStore(t), "nope"); err == nil {
		t.Error("report of an unknown sandbox")
	}
}

func TestReportMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport(t).Markdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	order := []string{"## Sandbox", "## Denied (2)", "## Would be denied", "## Commands (1)", "## Network by category",
		"## DNS names (2)", "## Kernel drops (1)", "## Secrets injected (1)", "## Packages fetched (1)", "## Files changed (1)", "## Hash-chain anchor"}
	at := 0
	for _, h := range order {
		i := strings.Index(md[at:], h)
		if i < 0 {
			t.Fatalf("section %q missing or out of order:\n%s", h, md)
		}
		at += i
	}
	if !strings.Contains(md, "deny.hosts[0] (p.toml:20:9)") || !strings.Contains(md, "`npm install`") {
		t.Errorf("markdown lacks evidence:\n%s", md)
	}
}

var externalRef = regexp.MustCompile(`(?i)(<script|<link|<img|<iframe|src=|url\(|@import|https?://[^<"]*"[^>]*>)`)

func TestReportHTMLSelfContained(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport(t).HTML(&b); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	if m := externalRef.FindString(html); m != "" {
		t.Errorf("report references something outside itself: %q", m)
	}
	at := 0
	for _, id := range ReportSections {
		i := strings.Index(html[at:], `<section id="`+id+`"`)
		if i < 0 {
			t.Fatalf("section %s missing or out of order", id)
		}
		at += i
	}
}

// TestReportInChromium renders the incident report (a quick-start-shaped
// sandbox with a 31-line limits detail, long names and ranked denials) in
// headless Chromium at 1280x2000 and in print, and checks what a
// responder sees (users.md §3): every section laid out, the most serious
// denial first and on the first screen, linked to its command, the
// timeline drawn, no host or rule broken inside a label. The screenshot
// and the PDF are kept as artifacts (path in the log).
func TestReportInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium; make setup installs it)")
	}
	var b bytes.Buffer
	if err := incidentReport(t).HTML(&b); err != nil {
		t.Fatal(err)
	}
	art := artifactDir(t)
	page := filepath.Join(art, "report.html")
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// One Chromium run: the page with a probe script appended (it only sets
	// an attribute, so the screenshot is of the report as people see it).
	probe := filepath.Join(t.TempDir(), "probe.html")
	withProbe := strings.Replace(b.String(), "</body>", probeScript()+"</body>", 1)
	if err := os.WriteFile(probe, []byte(withProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(art, "report.png")
	os.Remove(shot)
	dom := runChromium(t, chromium, "--screenshot="+shot, "--dump-dom", "--window-size=1280,2000", "file://"+probe)
	checkPNG(t, shot, 1280, 2000)
	t.Logf("report screenshot: %s (page %s)", shot, page)
	m := regexp.MustCompile(`data-probe="([^"]*)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("probe did not run; DOM:\n%.2000s", dom)
	}
	got := strings.Split(m[1], ";")
	var want []string
	for _, id := range ReportSections {
		want = append(want, id+"=visible")
	}
	want = append(want, "deny-colour=rgb(254, 226, 226)", "allow-colour=rgb(220, 252, 231)",
		"first-denial=1 169.254.169.254", "denied-on-first-screen=true", "detail-folded=true",
		"first-denial-command=#cmd-x2 found", "timeline=svg rows=6 allowed-bars=yes denied-bars=yes fits=true",
		"mid-token-breaks=none", "external-requests=0")
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("rendered report (-want +got):\n%s", d)
	}

	pdf := filepath.Join(art, "report.pdf")
	os.Remove(pdf)
	runChromium(t, chromium, "--print-to-pdf="+pdf, "--no-pdf-header-footer", "file://"+page)
	raw, err := os.ReadFile(pdf)
	if err != nil || len(raw) < 10000 || !bytes.HasPrefix(raw, []byte("%PDF-")) {
		t.Fatalf("print: %v, %d bytes", err, len(raw))
	}
	if !bytes.Contains(raw, []byte("/Type /Page")) {
		t.Errorf("print: no page in the PDF")
	}
	t.Logf("report print: %s (%d bytes)", pdf, len(raw))
}

// checkPNG asserts path is a PNG of w x h pixels with real content.
func checkPNG(t *testing.T, path string, w, h int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), w, h)
	}
	colours := map[[3]uint32]bool{}
	for y := 0; y < h; y += 7 {
		for x := 0; x < w; x += 7 {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, b >> 8}] = true
		}
	}
	if len(colours) < 20 {
		t.Fatalf("screenshot has %d colours: a blank page?", len(colours))
	}
}

const visibilityProbe = `<script>
(function(){
 var out=[];
 ` + "%s" + `.forEach(function(id){
  var el=document.getElementById(id), r=el&&el.getBoundingClientRect(), cs=el&&getComputedStyle(el);
  var h=el&&el.querySelector('h2');
  out.push(id+'='+(el&&r.width>0&&r.height>0&&cs.display!='none'&&cs.visibility!='hidden'&&h&&h.textContent.length>0?'visible':'hidden'));
 });
 out.push('deny-colour='+getComputedStyle(document.querySelector('.v-deny')).backgroundColor);
 out.push('allow-colour='+getComputedStyle(document.querySelector('.v-allow')).backgroundColor);
 var first=document.querySelector('#denied tr.denial');
 out.push('first-denial='+(first?first.dataset.severity+' '+first.dataset.host:'none'));
 out.push('denied-on-first-screen='+(first?first.getBoundingClientRect().bottom<800:false));
 var det=document.querySelector('details.detail');
 out.push('detail-folded='+(det?!det.open&&det.getBoundingClientRect().height<40:false));
 var a=first&&first.querySelector('a.cmd-link'), href=a?a.getAttribute('href'):'';
 out.push('first-denial-command='+href+' '+(href&&document.getElementById(href.slice(1))?'found':'missing'));
 var svg=document.querySelector('#timeline svg'), sr=svg&&svg.getBoundingClientRect();
 out.push('timeline='+(svg?'svg rows='+svg.querySelectorAll('g.tl-row').length+
  ' allowed-bars='+(svg.querySelectorAll('rect.tl-allow').length>0?'yes':'no')+
  ' denied-bars='+(svg.querySelectorAll('rect.tl-deny').length>0?'yes':'no')+
  ' fits='+(sr.width>600&&sr.right<=document.documentElement.clientWidth):'none'));
 // A host, rule or image may wrap only at a <wbr>: every text piece
 // between two of them (that has no space) must sit on one line.
 var broken=[];
 document.querySelectorAll('td.dest code, #denied td code, #sandbox code').forEach(function(c){
  c.childNodes.forEach(function(n){
   if(n.nodeType!==3||/\s/.test(n.textContent))return;
   var rg=document.createRange(); rg.selectNodeContents(n);
   if(rg.getClientRects().length>1)broken.push(n.textContent);
  });
 });
 out.push('mid-token-breaks='+(broken.length?broken.join(','):'none'));
 out.push('external-requests='+performance.getEntriesByType('resource').length);
 document.body.setAttribute('data-probe', out.join(';'));
})();
</script>`

// probeScript is visibilityProbe with the section ids filled in.
func probeScript() string {
	ids := `["` + strings.Join(ReportSections, `","`) + `"]`
	return strings.Replace(visibilityProbe, "%s", ids, 1)
}

func runChromium(t *testing.T, chromium string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

// artifactDir is $AIRLOCK_ARTIFACTS/audit, or a fixed directory under the
// system temp dir, kept after the test.
func artifactDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("AIRLOCK_ARTIFACTS")
	if base == "" {
		base = filepath.Join(os.TempDir(), "airlock-artifacts")
	}
	dir := filepath.Join(base, "audit")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
