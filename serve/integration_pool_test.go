//go:build remote

package serve_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/e2e/world"
	"airlock/runner"
)

// TestWarmPool runs an appliance with a warm pool of Debian sandboxes:
// an unclaimed member sends nothing anywhere (the canary records no packet
// while it tries every protocol for 60 s; the kernel counts the drops), a
// create claims a member, which then reaches what its policy allows, and
// after a kill -9 the unclaimed members are removed and the claimed one
// adopted.
func TestWarmPool(t *testing.T) {
	l := poolLab(t, 2, "500ms")
	members := waitPooled(t, l, 2, nil)
	m := members[0]

	canary := l.w.Addr(world.RoleCanary).String()
	url := "https://" + l.w.Name(world.RoleNPM) + "/airlock-demo" // allowed by the lab policy once claimed
	mark := l.w.Mark()
	probe := "end=$(( $(date +%s) + " + strconv.Itoa(leakSeconds()) + " )); while [ $(date +%s) -lt $end ]; do " +
		"curl -s --max-time 2 http://" + canary + "/ ; curl -sk --max-time 2 https://" + canary + "/ ; " +
		"(echo leak > /dev/udp/" + canary + "/53) 2>/dev/null; (echo leak > /dev/tcp/" + canary + "/22) 2>/dev/null; " +
		"getent hosts " + l.w.Name(world.RoleCanary) + "; curl -s --max-time 2 --noproxy '*' " + url + "; done; echo done"
	out, err := exec.Command("podman", "--remote", "--url", "unix://"+l.podman, "exec", runner.ContainerName(m),
		"bash", "-c", probe).CombinedOutput()
	if err != nil {
		t.Fatalf("probe in the unclaimed member: %v\n%s", err, out)
	}
	if got := l.w.Since(mark); len(got) > 0 {
		t.Fatalf("an unclaimed member reached the world (%d records): %v", len(got), got[:min(len(got), 5)])
	}
	if !regexp.MustCompile(`airlock_kernel_drops_total\{reason="unconfigured-interface"\} [1-9]`).Match(scrape(t, l)) {
		t.Errorf("the kernel counted no drop of the unclaimed member")
	}

	start := time.Now()
	sb := l.create(debianImage)
	t.Logf("create served from the warm pool in %v", time.Since(start))
	if !slices.Contains(members, sb.ID) {
		t.Fatalf("create %s did not claim a member of %v", sb.ID, members)
	}
	if r := l.exec(sb.ID, curlOpts+"--noproxy '*' -o /dev/null -w '%{http_code}' "+url); r.stdout != "200" {
		t.Fatalf("the claimed member cannot reach what its policy allows: %v\n%s", r, l.tail(20))
	}
	if _, ok := findEvent(l.events(sb.ID), func(e audit.Event) bool { return e.Lifecycle != nil && e.Lifecycle.Stage == "claimed" }); !ok {
		t.Errorf("no claimed event for %s", sb.ID)
	}
	if !regexp.MustCompile(`airlock_pool_hits_total 1`).Match(scrape(t, l)) {
		t.Errorf("pool hits not counted")
	}
	refilled := waitPooled(t, l, 3, nil) // the refill replaced the claimed one
	if !t.Run("pause", func(t *testing.T) { l.t = t; pauseInLab(t, l, sb.ID, url) }) {
		return
	}
	l.t = t

	l.kill9()
	l.startServe()
	var unclaimed []string
	for _, id := range refilled {
		if id != sb.ID {
			unclaimed = append(unclaimed, id)
		}
	}
	for _, id := range unclaimed {
		waitFor(t, 30*time.Second, "the recycled event of "+id, func() bool {
			_, ok := findEvent(l.events(id), func(e audit.Event) bool { return e.Lifecycle != nil && e.Lifecycle.Stage == "recycled" })
			return ok
		})
	}
	if got, err := l.c.Get(context.Background(), sb.ID); err != nil || got.Policy != "lab" {
		t.Fatalf("after the restart the claimed member is %+v, %v", got, err)
	}
	if r := l.exec(sb.ID, curlOpts+"--noproxy '*' -o /dev/null -w '%{http_code}' "+url); r.stdout != "200" {
		t.Fatalf("after the restart the claimed member lost its path: %v\n%s", r, l.tail(20))
	}
	waitPooled(t, l, 5, nil)
	for _, id := range unclaimed {
		if sb2, err := l.c.Get(context.Background(), id); err == nil {
			t.Errorf("a recycled member is a sandbox: %+v", sb2)
		}
	}
}

// poolLab starts a lab appliance with a warm pool of size Debian members
// refilled every refill, and the agent a claim binds a member through.
func poolLab(t *testing.T, size int, refill string) *lab {
	l := newLab(t, debianImage)
	l.extra = fmt.Sprintf("\n[pool]\nimages = { %q = %d }\nrefill = %q\n", debianImage, size, refill)
	l.writeFiles()
	l.spec.agent = buildAgent(t, l.dir)
	t.Cleanup(func() { removeInstance(l) }) // after the appliance stopped: it refills until then
	l.startServe()
	return l
}

// leakSeconds is how long the unclaimed member tries to get out (the
// issue's 60 s; AIRLOCK_POOL_LEAK_SECONDS shortens it for a quick run).
func leakSeconds() int {
	if n, err := strconv.Atoi(os.Getenv("AIRLOCK_POOL_LEAK_SECONDS")); err == nil && n > 0 {
		return n
	}
	return 60
}

// waitPooled waits until n pooled events were written and returns the
// members' ids, oldest first.
func waitPooled(t *testing.T, l *lab, n int, _ []string) []string {
	t.Helper()
	var ids []string
	waitFor(t, 3*time.Minute, strconv.Itoa(n)+" pooled members", func() bool {
		ids = ids[:0]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l.c.Logs(ctx, client.LogQuery{Kind: audit.KindLifecycle}, func(e audit.Event) error {
			if e.Lifecycle.Stage == "pooled" {
				ids = append(ids, e.Sandbox)
			}
			return nil
		})
		return len(ids) >= n
	})
	return ids
}

func scrape(t *testing.T, l *lab) []byte {
	t.Helper()
	resp, err := http.Get("http://" + l.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b
}

// removeInstance removes every container of the test's instance (the
// appliance leaves its warm members running for the next start, like any
// sandbox).
func removeInstance(l *lab) {
	out, _ := exec.Command("podman", "--remote", "--url", "unix://"+l.podman, "ps", "-aq",
		"--filter", "label="+runner.LabelInstance+"="+l.spec.instance).Output()
	for _, id := range strings.Fields(string(out)) {
		exec.Command("podman", "--remote", "--url", "unix://"+l.podman, "rm", "-f", "-t", "0", id).Run()
	}
}

// buildAgent builds airlock-init (static) into dir: a claim binds a
// member through it.
func buildAgent(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "airlock-init")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "airlock/cmd/airlock-init")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build airlock-init: %v: %s", err, b)
	}
	return out
}

// pauseInLab: on a host without cgroup freezing, a paused sandbox runs
// nothing (its counting loop stands still, commands are refused) and sends
// nothing (a process started inside through the engine reaches nothing);
// resume restores both.
func pauseInLab(t *testing.T, l *lab, id, url string) {
	ctx := context.Background()
	loop := "i=0; while :; do i=$((i+1)); echo $i > /tmp/c.tmp; mv /tmp/c.tmp /tmp/count; sleep 0.05; done"
	if _, err := l.c.Exec(ctx, id, client.ExecRequest{Argv: []string{"sh", "-c", loop}, Background: true}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		out, _ := engineExec(l, id, "cat /tmp/count")
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		return n
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := l.c.Pause(ctx, id); err != nil {
		t.Fatalf("pause: %v\n%s", err, l.tail(20))
	}
	t.Logf("pause took %v", time.Since(start))
	c1 := count()
	time.Sleep(time.Second)
	if c2 := count(); c1 == 0 || c2 != c1 {
		t.Errorf("the counting loop moved while paused: %d -> %d", c1, c2)
	}
	if _, err := l.c.Exec(ctx, id, client.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard); err == nil {
		t.Error("a command ran in a paused sandbox")
	}
	mark := l.w.Mark()
	if out, err := engineExec(l, id, "curl -sS --max-time 3 --noproxy '*' -o /dev/null -w '%{http_code}' "+url); err == nil {
		t.Errorf("a paused sandbox reached the registry: %s", out)
	}
	if got := l.w.Since(mark); len(got) > 0 {
		t.Errorf("a paused sandbox reached the world: %v", got[:min(len(got), 5)])
	}
	start = time.Now()
	if err := l.c.Resume(ctx, id); err != nil {
		t.Fatalf("resume: %v\n%s", err, l.tail(20))
	}
	t.Logf("resume took %v", time.Since(start))
	c3 := count()
	time.Sleep(500 * time.Millisecond)
	if c4 := count(); c4 <= c3 {
		t.Errorf("the counting loop did not resume: %d -> %d", c3, c4)
	}
	if r := l.exec(id, curlOpts+"--noproxy '*' -o /dev/null -w '%{http_code}' "+url); r.stdout != "200" {
		t.Errorf("after resume: %v", r)
	}
	var stages []string
	for _, e := range l.events(id) {
		if e.Lifecycle != nil && (e.Lifecycle.Stage == "paused" || e.Lifecycle.Stage == "resumed") {
			stages = append(stages, e.Lifecycle.Stage+": "+e.Lifecycle.Detail)
		}
	}
	if len(stages) != 2 || !strings.Contains(stages[0], "network cut") || !strings.Contains(stages[1], "network restored") {
		t.Errorf("lifecycle records: %q", stages)
	}
}

// engineExec runs a shell line in a sandbox through Podman, not the
// appliance: a new process, so not one pause stopped.
func engineExec(l *lab, id, script string) (string, error) {
	out, err := exec.Command("podman", "--remote", "--url", "unix://"+l.podman, "exec", runner.ContainerName(id),
		"sh", "-c", script).CombinedOutput()
	return string(out), err
}

// TestClaimsShareNothing: two creates claim two warm members one after the
// other; the second user finds nothing of the first (files in /tmp and
// /workspace, a background process, its environment), is never handed the
// first's member, and its egress is recorded under its own id alone.
func TestClaimsShareNothing(t *testing.T) {
	l := poolLab(t, 1, "200ms")
	ctx := context.Background()
	url := "https://" + l.w.Name(world.RoleNPM) + "/airlock-demo"
	claim := func(task string, made int) client.Sandbox { // made: members made so far, this one among them
		t.Helper()
		pooled := waitPooled(t, l, made, nil)
		sb, err := l.c.Create(ctx, client.CreateRequest{Image: debianImage, Env: map[string]string{"TASK": task}})
		if err != nil {
			t.Fatalf("create: %v\n%s", err, l.tail(20))
		}
		if !slices.Contains(pooled, sb.ID) {
			t.Fatalf("create %s did not claim a member of %v", sb.ID, pooled)
		}
		return sb
	}

	first := claim("first", 1)
	if r := l.exec(first.ID, "echo secret > /tmp/first; echo secret > /workspace/first; echo $TASK; "+
		curlOpts+"--noproxy '*' -o /dev/null -w ' %{http_code}' "+url); r.stdout != "first\n 200" {
		t.Fatalf("the first user's work: %v", r)
	}
	if _, err := l.c.Exec(ctx, first.ID, client.ExecRequest{Argv: []string{"sleep", "3601"}, Background: true}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := l.c.Delete(ctx, first.ID); err != nil {
		t.Fatal(err)
	}

	second := claim("second", 2)
	if second.ID == first.ID {
		t.Fatalf("member %s was claimed twice", second.ID)
	}
	r := l.exec(second.ID, "ls /tmp /workspace; echo TASK=$TASK; ps -eo args; "+
		curlOpts+"--noproxy '*' -o /dev/null -w 'http %{http_code}' "+url)
	for _, leak := range []string{"first", "sleep 3601"} {
		if strings.Contains(r.stdout, leak) {
			t.Errorf("the second user sees %q of the first:\n%s", leak, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "TASK=second") || !strings.HasSuffix(r.stdout, "http 200") {
		t.Errorf("the second user's own environment and egress: %v", r)
	}
	var egress int
	for _, e := range l.events(second.ID) {
		if e.Kind == audit.KindHTTP || e.Kind == audit.KindFlow || e.Kind == audit.KindDNS {
			egress++
		}
	}
	if egress == 0 {
		t.Errorf("the second user's egress is not recorded under its id %s", second.ID)
	}
	for _, e := range l.events(first.ID) {
		if e.Time.After(second.Created) && (e.Kind == audit.KindHTTP || e.Kind == audit.KindFlow || e.Kind == audit.KindDNS) {
			t.Errorf("egress after the first user ended is recorded under its id: %+v", e)
		}
	}
}
