package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestQuickstartLeavesWhatItShows runs `make run`'s script and follows its
// hints the way a new user would (users.md S1): the report command that
// `airlock run` prints works after the run (it lacked --state-dir, and the
// store was deleted on exit), the work directory with the store and the
// JSONL stream is kept, the Markdown report is printed whole, and the
// direct connection's `nc` status is explained.
func TestQuickstartLeavesWhatItShows(t *testing.T) {
	requireServe(t, false)
	if err := imageExists("localhost/airlock/busybox:1"); err != nil {
		t.Skipf("skipping: the busybox sandbox image is not built (make image): %v", err)
	}
	bin := airlockBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(), "scripts/quickstart.sh"))
	cmd.Env = append(os.Environ(), "AIRLOCK_BIN="+bin)
	b, err := cmd.CombinedOutput()
	out := string(b)
	kept := regexp.MustCompile(`kept for you to explore: (\S+)`).FindStringSubmatch(out)
	if kept != nil {
		t.Cleanup(func() { os.RemoveAll(kept[1]) })
	}
	if err != nil {
		t.Fatalf("quickstart: %v\n%s", err, out)
	}
	if kept == nil {
		t.Fatalf("the quick start does not say where its work directory is:\n%s", out)
	}
	for _, f := range []string{"state/audit.db", "events.jsonl", "serve.log"} {
		if _, err := os.Stat(filepath.Join(kept[1], f)); err != nil {
			t.Errorf("the quick start removed %s: %v", f, err)
		}
	}
	if !strings.Contains(out, "## Hash-chain anchor") {
		t.Errorf("the Markdown report is cut short (no Hash-chain anchor section):\n%s", out)
	}
	if !strings.Contains(out, "nc exit 0: nc reports 0 because the connection was accepted") {
		t.Errorf("the direct connection's nc status is not explained:\n%s", out)
	}
	hint := regexp.MustCompile(`review report: airlock (report .*)`).FindStringSubmatch(out)
	if hint == nil {
		t.Fatalf("airlock run printed no review-report hint:\n%s", out)
	}
	dir := t.TempDir()
	args := strings.Fields(hint[1])
	rep := exec.Command(bin, args...)
	rep.Dir = dir
	if b, err := rep.CombinedOutput(); err != nil {
		t.Fatalf("the hint `airlock %s` fails after the quick start: %v\n%s", hint[1], err, b)
	}
	html, _ := filepath.Glob(filepath.Join(dir, "report-*.html"))
	if len(html) != 1 {
		t.Fatalf("the hint wrote %v, want one report-ID.html", html)
	}
	if b, _ := os.ReadFile(html[0]); !strings.Contains(string(b), "<html") {
		t.Errorf("%s is not an HTML report", html[0])
	}
}
