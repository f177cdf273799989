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

// templateInLab: a template built under the lab policy fetches from an
// allowed host during setup (its egress logged under the build sandbox); a
// sandbox from it holds the result and records the version; a build whose
// setup is denied stops with the command and the denial, and leaves no
// template.
func templateInLab(t *testing.T, l *lab) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l.startServe()
	npm, evil := l.w.Name(world.RoleNPM), l.w.Name(world.RoleEvil)
	tm, err := l.c.BuildTemplate(ctx, client.TemplateRequest{Name: "lab", From: debianImage,
		Setup: []string{curlOpts + "-o /opt/demo https://" + npm + "/airlock-demo"}})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, l.tail(30))
	}
	t.Cleanup(func() { l.c.RemoveTemplate(context.Background(), "lab") })
	if tm.Ref != "lab:v1" || len(tm.Setup) != 1 || tm.Setup[0].ExitCode != 0 || tm.PolicyHash == "" || tm.ImageID == "" {
		t.Errorf("template %+v", tm)
	}
	if _, ok := findEvent(l.events(tm.Sandbox), func(e audit.Event) bool {
		return e.Verdict == "allow" && strings.Contains(audit.Host(&e), npm)
	}); !ok {
		t.Errorf("the build's egress to %s is not in the log of build sandbox %s", npm, tm.Sandbox)
	}
	sb, err := l.c.Create(ctx, client.CreateRequest{Template: "lab"})
	if err != nil {
		t.Fatalf("create from the template: %v", err)
	}
	t.Cleanup(func() { l.c.Delete(context.Background(), sb.ID) })
	if sb.Template != "lab:v1" || sb.ImageID != tm.ImageID {
		t.Errorf("sandbox %+v", sb)
	}
	if r := l.exec(sb.ID, "test -s /opt/demo"); r.code != 0 {
		t.Errorf("the setup's download is not in the template: %v", r)
	}
	_, err = l.c.BuildTemplate(ctx, client.TemplateRequest{Name: "lab-bad", From: debianImage,
		Setup: []string{"true", curlOpts + "https://" + evil + "/"}})
	if !client.IsCode(err, client.CodeInvalid) || !strings.Contains(err.Error(), "setup command 2") ||
		!strings.Contains(err.Error(), "denied: ") || !strings.Contains(err.Error(), evil) {
		t.Errorf("denied build: %v", err)
	}
	if _, err := l.c.Template(ctx, "lab-bad"); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("a failed build left a template: %v", err)
	}
}
