package audit

import (
	"bytes"
	"context"
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

// TestReportInChromium renders the report in headless Chromium, checks that
// every section is laid out visibly and verdicts are coloured, and keeps a
// screenshot as an artifact.
func TestReportInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium; make setup installs it)")
	}
	var b bytes.Buffer
	if err := sampleReport(t).HTML(&b); err != nil {
		t.Fatal(err)
	}
	art := artifactDir(t)
	if err := os.WriteFile(filepath.Join(art, "report.html"), b.Bytes(), 0o644); err != nil {
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
	dom := runChromium(t, chromium, "--screenshot="+shot, "--dump-dom", "--window-size=1280,2200", "file://"+probe)
	if st, err := os.Stat(shot); err != nil || st.Size() < 10000 {
		t.Fatalf("no screenshot: %v", err)
	}
	t.Logf("report screenshot: %s", shot)
	m := regexp.MustCompile(`data-probe="([^"]*)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("probe did not run; DOM:\n%.2000s", dom)
	}
	got := strings.Split(m[1], ";")
	var want []string
	for _, id := range ReportSections {
		want = append(want, id+"=visible")
	}
	want = append(want, "deny-colour=rgb(254, 226, 226)", "allow-colour=rgb(220, 252, 231)")
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("rendered sections (-want +got):\n%s", d)
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
