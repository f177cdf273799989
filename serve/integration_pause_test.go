//go:build remote

package serve_test

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/e2e/world"
)

// TestPauseAcrossRestart: a paused sandbox stays paused when `airlock
// serve` is killed -9 and started again: its processes stay stopped (a
// counting loop stands still while serve is down and after it is back),
// its network stays cut in the kernel (a process started inside through
// the engine reaches nothing), the API shows it paused and refuses
// commands, and the adopted record says paused. Resume then restores both.
func TestPauseAcrossRestart(t *testing.T) {
	l := newLab(t, debianImage)
	l.spec.agent = buildAgent(t, l.dir) // the counting loop runs in the background through the agent
	l.startServe()
	sb := l.create(debianImage)
	ctx := context.Background()
	url := "https://" + l.w.Name(world.RoleNPM) + "/airlock-demo" // the lab policy allows it
	if r := l.exec(sb.ID, curlOpts+"--noproxy '*' -o /dev/null -w '%{http_code}' "+url); r.stdout != "200" {
		t.Fatalf("before the pause: %v\n%s", r, l.tail(20))
	}
	loop := "i=0; while :; do i=$((i+1)); echo $i > /tmp/c.tmp; mv /tmp/c.tmp /tmp/count; sleep 0.05; done"
	if _, err := l.c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", loop}, Background: true}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		out, _ := engineExec(l, sb.ID, "cat /tmp/count")
		n, _ := strconv.Atoi(strings.TrimSpace(out))
		return n
	}
	waitFor(t, 30*time.Second, "the counting loop", func() bool { return count() > 0 })
	if err := l.c.Pause(ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v\n%s", err, l.tail(20))
	}
	stopped := count()
	standsStill := func(when string) {
		t.Helper()
		time.Sleep(time.Second)
		if c := count(); stopped == 0 || c != stopped {
			t.Errorf("%s: the counting loop moved: %d -> %d", when, stopped, c)
		}
	}
	standsStill("paused")

	l.kill9()
	standsStill("serve killed")
	l.startServe()
	got, err := l.c.Get(ctx, sb.ID)
	if err != nil || got.State != client.StatePaused || got.Labels["adopted"] != "true" {
		t.Fatalf("after the restart: %+v, %v\n%s", got, err, l.tail(30))
	}
	standsStill("serve restarted")
	if _, err := l.c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard); !client.IsCode(err, client.CodeConflict) {
		t.Errorf("a command in the paused sandbox after the restart: %v, want conflict", err)
	}
	mark := l.w.Mark()
	if out, err := engineExec(l, sb.ID, curlOpts+"--max-time 5 --noproxy '*' -o /dev/null -w '%{http_code}' "+url); err == nil {
		t.Errorf("after the restart, a paused sandbox reached the registry: %s", out)
	}
	if got := l.w.Since(mark); len(got) > 0 {
		t.Errorf("after the restart, a paused sandbox reached the world: %v", got[:min(len(got), 5)])
	}
	adopted, ok := findEvent(l.events(sb.ID), func(e audit.Event) bool { return e.Lifecycle != nil && e.Lifecycle.Stage == "adopted" })
	if !ok || adopted.Lifecycle.State != audit.StatePaused {
		t.Errorf("adopted record: %+v (found %t)", adopted.Lifecycle, ok)
	}

	if err := l.c.Resume(ctx, sb.ID); err != nil {
		t.Fatalf("resume after the restart: %v\n%s", err, l.tail(30))
	}
	waitFor(t, 10*time.Second, "the counting loop to move again", func() bool { return count() > stopped })
	if r := l.exec(sb.ID, curlOpts+"--noproxy '*' -o /dev/null -w '%{http_code}' "+url); r.stdout != "200" {
		t.Errorf("after resume: %v\n%s", r, l.tail(20))
	}
	if got, err := l.c.Get(ctx, sb.ID); err != nil || got.State != client.StateRunning {
		t.Errorf("after resume: %+v, %v", got, err)
	}
	resumed, ok := findEvent(l.events(sb.ID), func(e audit.Event) bool { return e.Lifecycle != nil && e.Lifecycle.Stage == "resumed" })
	if !ok || resumed.Lifecycle.State != audit.StateRunning || resumed.Lifecycle.Principal != "local" {
		t.Errorf("resumed record: %+v (found %t)", resumed.Lifecycle, ok)
	}
}
