//go:build remote

package serve_test

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/e2e/world"
	"airlock/runner"
)

// artifactsAfterKill9: serve is killed -9 while a sandbox runs; its
// container is killed while the appliance is down. The restarted appliance
// exports its artifacts (the changed file, the declared output, the command
// records, the report), serves them through the API and logs the end.
func artifactsAfterKill9(t *testing.T, l *lab) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l.startServe() // the previous step's appliance ended with it
	sb, err := l.c.Create(ctx, client.CreateRequest{Image: busyboxImage, Outputs: []string{"/out"}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, l.tail(20))
	}
	t.Cleanup(func() {
		exec.Command("podman", "--remote", "--url", "unix://"+l.podman, "rm", "-f", runner.ContainerName(sb.ID)).Run()
	})
	if r := l.exec(sb.ID, "echo kept > /workspace/note.txt && mkdir /out && echo 42 > /out/r"); r.code != 0 {
		t.Fatalf("write: %v", r)
	}
	l.kill9()
	if out, err := exec.Command("podman", "--remote", "--url", "unix://"+l.podman, "kill",
		runner.ContainerName(sb.ID)).CombinedOutput(); err != nil {
		t.Fatalf("podman kill: %v\n%s", err, out)
	}
	l.startServe()
	a, err := l.c.Artifacts(ctx, sb.ID)
	if err != nil {
		t.Fatalf("artifacts after the restart: %v\n%s", err, l.tail(30))
	}
	var names []string
	for _, f := range a.Files {
		names = append(names, f.Name)
	}
	for _, want := range []string{"files/note.txt", "outputs/1-out.tar", "commands.jsonl", "report.md", "diff.patch"} {
		if !slices.Contains(names, want) {
			t.Errorf("artifact %s missing from %q (errors %q)", want, names, a.Errors)
		}
	}
	var b bytes.Buffer
	if err := l.c.Artifact(ctx, sb.ID, "files/note.txt", &b); err != nil || b.String() != "kept\n" {
		t.Errorf("files/note.txt: %q %v", b.String(), err)
	}
	if _, err := l.c.Get(ctx, sb.ID); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("the ended sandbox is still listed: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if e, ok := findEvent(l.events(sb.ID), func(e audit.Event) bool {
			return e.Kind == audit.KindLifecycle && e.Lifecycle.Stage == "destroyed"
		}); ok {
			if !strings.Contains(e.Lifecycle.Detail, "reconcile at restart") || len(e.Lifecycle.Changes) == 0 {
				t.Errorf("end record %+v", e.Lifecycle)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no destroyed record for %s after the restart", sb.ID)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// resetInLab: a reset sandbox has lost what was written in it, keeps its
// address, and its egress through the real path still works (the kernel
// path is attached to the new veth, the policy is the same).
func resetInLab(t *testing.T, l *lab, sb client.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l.startServe()
	if r := l.exec(sb.ID, "echo x > /root/before"); r.code != 0 {
		t.Fatalf("write: %v", r)
	}
	res, err := l.c.Reset(ctx, sb.ID)
	if err != nil {
		t.Fatalf("reset: %v\n%s", err, l.tail(30))
	}
	t.Logf("reset took %d ms: %.12s -> %.12s", res.DurationMS, res.OldContainer, res.NewContainer)
	if res.Sandbox.Address != sb.Address || res.NewContainer == res.OldContainer {
		t.Errorf("reset %+v, before %+v", res, sb)
	}
	if r := l.exec(sb.ID, "test -e /root/before"); r.code == 0 {
		t.Error("a file written before the reset is still there")
	}
	url := "https://" + l.w.Name(world.RoleNPM) + "/airlock-demo"
	if r := l.exec(sb.ID, curlOpts+"-o /dev/null -w '%{http_code}' "+url); r.stdout != "200" {
		t.Errorf("egress after the reset: %v\n%s", r, l.tail(30))
	}
}
