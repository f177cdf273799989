package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestQuickstartShowsARealTask runs `make run`'s script the way a new user
// would (users.md S1, issue 18): it brings up the hermetic world, points
// an appliance at it and runs the agent task of
// sdk/python/examples/agent_task.py in a template of the Debian image that
// it builds, with a warm pool of one: the task's create must be a claim of
// the member the quick start waited for, and so must the `airlock run
// --template` after it, of the member the pool made next (issue 17). The
// task must go
// as the policy says (the clone, the npm install, the internal API call
// with the injected credential and the webhook work; the push, the denied
// package and both exfiltration tricks are refused naming their rule), the
// world must have received nothing it should not, the credential must
// appear nowhere the user sees, the commands printed at the end must work
// on what was kept, and nothing else may be left behind: no world
// namespace, no kernel path, no runtime directory, no container (the pool's
// refilled member included), no template image.
func TestQuickstartShowsARealTask(t *testing.T) {
	requireAppliance(t)
	bin := airlockBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(), "scripts/quickstart.sh"))
	cmd.Env = append(os.Environ(), "AIRLOCK_BIN="+bin)
	start := time.Now()
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("the quick start took %s", time.Since(start).Round(time.Second))
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
	work := kept[1]
	for _, f := range []string{"state/audit.db", "events.jsonl", "serve.log", "report.html"} {
		if _, err := os.Stat(filepath.Join(work, f)); err != nil {
			t.Errorf("the quick start did not keep %s: %v", f, err)
		}
	}
	for _, want := range []string{
		"# airlock e2e demo", // the clone
		"-> refused by categories.git.push",
		"airlock-demo@1.0.0",
		"-> refused by categories.registries.packages.deny[0]",
		`{"auth":"ok"`,
		`{"received":"/hooks/ci"}`,
		"no category covers this name",    // the foreign resolver
		"no category covers this address", // the bare IP
		"GET /v1/items/42 [with the injected credential]",
		"ok: no git push arrived",
		"ok: no denied package was served",
		"ok: nothing reached evil.test or canary.test",
		"## Hash-chain anchor", // the Markdown report, whole
		"every step went as the policy says",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the quick start's output lacks %q", want)
		}
	}
	pooledClaim(t, work, out)
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
	noCredential(t, work, out)
	followHints(t, out, work)
	nothingLeft(t, work, out)
}

// pooledClaim checks that the quick start built the template, waited for
// its pool, and that the task's create claimed that very member (the
// sandbox id is the member's, the task says so, and the audit stream has
// the claim), then that `airlock run --template` claimed a member too.
func pooledClaim(t *testing.T, work, out string) {
	t.Helper()
	tmpl := regexp.MustCompile(`(?m)^  template (agent-qs[0-9a-f]+:v1)$`).FindStringSubmatch(out)
	member := regexp.MustCompile(`the warm pool is filled: sandbox ([0-9a-f]+) of agent-qs`).FindStringSubmatch(out)
	sb := regexp.MustCompile(`(?m)^sandbox: ([0-9a-f]+) \(template (\S+), `).FindStringSubmatch(out)
	if tmpl == nil || member == nil || sb == nil {
		t.Errorf("the quick start does not show the template (%q), its pool's member (%q) and a sandbox from the template (%q)", tmpl, member, sb)
		return
	}
	if !strings.Contains(out, "  setup 1   exit 0 in ") {
		t.Errorf("the template build shows no setup command that succeeded")
	}
	if sb[1] != member[1] || sb[2] != tmpl[1] {
		t.Errorf("the task's sandbox %s from %s is not the pool's member %s of %s", sb[1], sb[2], member[1], tmpl[1])
	}
	if !regexp.MustCompile(`(?m)^  created in \d+ ms: claimed from the warm pool \(warm pool member made \S+ ago, claimed in \S+\)$`).MatchString(out) {
		t.Errorf("the task does not say its create was a claim from the warm pool")
	}
	run := regexp.MustCompile(`(?m)^  airlock: sandbox ([0-9a-f]+) \(template (\S+), policy `).FindStringSubmatch(out)
	if run == nil || run[2] != tmpl[1] || run[1] == sb[1] {
		t.Errorf("the quick start shows no `airlock run --template` sandbox of %s besides the task's (%q)", tmpl[1], run)
		return
	}
	if !strings.Contains(out, "  sandbox "+run[1]+" is the member the pool made after the task's claim: this create was a claim too") {
		t.Errorf("the quick start does not say `airlock run --template` claimed the pool's next member")
	}
	for _, id := range []string{sb[1], run[1]} {
		if !claimedIn(filepath.Join(work, "events.jsonl"), id, tmpl[1]) {
			t.Errorf("events.jsonl has no claimed lifecycle event of sandbox %s from %s", id, tmpl[1])
		}
	}
}

// claimedIn reports whether the JSONL stream at path records that sandbox
// id claimed a warm member of template version tmpl.
func claimedIn(path, id, tmpl string) bool {
	events, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(events), "\n") {
		var e struct {
			Sandbox   string `json:"sandbox"`
			Lifecycle *struct {
				Stage    string `json:"stage"`
				Template string `json:"template"`
			} `json:"lifecycle"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Sandbox == id && e.Lifecycle != nil &&
			e.Lifecycle.Stage == "claimed" && e.Lifecycle.Template == tmpl {
			return true
		}
	}
	return false
}

// noCredential checks that the internal API's credential (in the kept
// secret store) is in neither the output nor the audit log.
func noCredential(t *testing.T, work, out string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(work, "secrets"))
	tok := strings.TrimPrefix(strings.TrimSpace(string(b)), "staging-token=")
	if err != nil || len(tok) < 16 {
		t.Fatalf("no credential in the kept secret store: %v %q", err, b)
	}
	events, _ := os.ReadFile(filepath.Join(work, "events.jsonl"))
	for name, s := range map[string]string{"the output": out, "events.jsonl": string(events)} {
		if strings.Contains(s, tok) {
			t.Errorf("%s holds the injected credential", name)
		}
	}
}

// followHints runs every command the quick start prints at the end, as
// printed.
func followHints(t *testing.T, out, work string) {
	t.Helper()
	hints := regexp.MustCompile(`(?m)^  (/\S+/airlock) (logs|report)( .*?)   # `).FindAllStringSubmatch(out, -1)
	kinds := map[string]bool{}
	for _, h := range hints {
		args := append([]string{h[2]}, strings.Fields(h[3])...)
		kinds[strings.Join(args[:2], " ")] = true
		if b, err := exec.Command(h[1], args...).CombinedOutput(); err != nil {
			t.Errorf("the hint `airlock %s` fails after the quick start: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	for _, k := range []string{"logs --state-dir", "report --state-dir", "logs verify"} {
		if !kinds[k] {
			t.Errorf("the quick start prints no `airlock %s ...` command (printed %v)", k, kinds)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(work, "report-again.html")); !strings.Contains(string(b), "<html") {
		t.Errorf("the report hint wrote no HTML report")
	}
}

// nothingLeft checks that the world's namespace, the appliance's kernel
// path and runtime directory, the world's binary and the sandbox are gone.
func nothingLeft(t *testing.T, work, out string) {
	t.Helper()
	env, _ := os.ReadFile(filepath.Join(work, "world.env"))
	ns := regexp.MustCompile(`(?m)^WORLD_NETNS='(airlock-world-[0-9a-f]+)'$`).FindSubmatch(env)
	ca := regexp.MustCompile(`(?m)^WORLD_CA_FILE='(/\S+)/world-ca.pem'$`).FindSubmatch(env)
	cfg, _ := os.ReadFile(filepath.Join(work, "airlock.toml"))
	rt := regexp.MustCompile(`(?m)^runtime_dir = "(/run/airlock-qs[0-9a-f]+)"$`).FindSubmatch(cfg)
	sb := regexp.MustCompile(`(?m)^sandbox: ([0-9a-f]+) `).FindStringSubmatch(out)
	if ns == nil || ca == nil || rt == nil || sb == nil {
		t.Fatalf("cannot tell what the quick start made (netns %q, world dir %q, runtime dir %q, sandbox %q)", ns, ca, rt, sb)
	}
	id := strings.TrimPrefix(string(rt[1]), "/run/airlock-")
	for _, p := range []string{"/run/netns/" + string(ns[1]), "/etc/netns/" + string(ns[1]), string(rt[1]),
		"/sys/fs/bpf/airlock-" + id, filepath.Join(work, "bin"), string(ca[1])} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("the quick start left %s behind", p)
		}
	}
	if links, _ := exec.Command("ip", "-o", "link", "show").Output(); strings.Contains(string(links), "alw"+strings.TrimPrefix(string(ns[1]), "airlock-world-")) {
		t.Errorf("the quick start left the world's veth behind:\n%s", links)
	}
	u, err := userIDs("airlock-sandbox")
	if err != nil {
		t.Fatal(err)
	}
	upodman := func(args ...string) ([]byte, error) {
		cmd := exec.Command("runuser", append([]string{"-u", "airlock-sandbox", "--", "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
			"HOME=" + u.home, "XDG_RUNTIME_DIR=/run/user/" + u.uid, "podman"}, args...)...)
		cmd.Dir = "/"
		return cmd.CombinedOutput()
	}
	if b, err := upodman("ps", "-a", "--format", "{{.Names}} {{.Labels}}"); err != nil || strings.Contains(string(b), sb[1]) ||
		strings.Contains(string(b), "io.airlock.instance:"+id) {
		t.Errorf("the sandbox %s or another container of instance %s is still there (podman ps: %v):\n%s", sb[1], id, err, b)
	}
	if b, err := upodman("images", "--format", "{{.Repository}}:{{.Tag}}"); err != nil || strings.Contains(string(b), "/agent-"+id+":") {
		t.Errorf("the template image of agent-%s is still there (podman images: %v):\n%s", id, err, b)
	}
}
