//go:build !airlock_thin

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"airlock/client"
	"airlock/serve"
)

// runBackend is the part of the appliance `airlock run` talks to; other
// methods are not called (the embedded nil interface would panic).
type runBackend struct {
	serve.Backend
	mu      sync.Mutex
	created client.CreateRequest
	deleted []string
	argv    []string
}

func (b *runBackend) Create(_ context.Context, req client.CreateRequest) (client.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created = req
	return client.Sandbox{ID: "sb1", Policy: "coding-agent", Address: "198.18.64.2", State: "running", Template: req.Template}, nil
}

func (b *runBackend) Exec(_ context.Context, id string, req client.ExecRequest, stdout, stderr io.Writer) (client.ExecResult, error) {
	b.mu.Lock()
	b.argv = req.Argv
	b.mu.Unlock()
	fmt.Fprint(stdout, "out\n")
	fmt.Fprint(stderr, "err\n")
	return client.ExecResult{ExitCode: 7}, nil
}

func (b *runBackend) Summary(_ context.Context, id string) (client.Summary, error) {
	return client.Summary{Sandbox: id, Report: "airlock report " + id,
		Categories: []client.CategoryCount{{Category: "git", Requests: 2, Destinations: []string{"git.example.test"}}},
		Denied:     []client.DeniedAttempt{{Destination: "evil.test", Kind: "dns", Rule: "default", Count: 1}},
		DNSNames:   []string{"evil.test", "git.example.test"}}, nil
}

func (b *runBackend) Delete(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deleted = append(b.deleted, id)
	return nil
}

func TestRunStreamsSummarizesAndExitsWithTheCommandsStatus(t *testing.T) {
	b := &runBackend{}
	sock := serveAPI(t, b)
	out, errb := captureCLI(t)
	code := run([]string{"run", "--socket", sock, "--policy", "coding-agent", "-e", "A=1",
		"localhost/airlock/busybox:1", "--", "sh", "-c", "exit 7"})
	if code != 7 {
		t.Errorf("exit code = %d, want the command's 7\nstderr:\n%s", code, errb.String())
	}
	if out.String() != "out\n" {
		t.Errorf("stdout = %q, want only the command's output", out.String())
	}
	for _, want := range []string{"err\n", "sandbox sb1", "git", "git.example.test", "evil.test", "rule default",
		"airlock report sb1", "removing sandbox sb1"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	if b.created.Policy != "coding-agent" || b.created.Env["A"] != "1" || b.created.Image != "localhost/airlock/busybox:1" {
		t.Errorf("create request = %+v", b.created)
	}
	if strings.Join(b.argv, " ") != "sh -c exit 7" || len(b.deleted) != 1 {
		t.Errorf("argv = %q, deleted = %v", b.argv, b.deleted)
	}
}

// captureCLI sends the CLI's output to the buffers it returns until the
// test ends.
func captureCLI(t *testing.T) (out, errb *bytes.Buffer) {
	out, errb = &bytes.Buffer{}, &bytes.Buffer{}
	rootCmd.SetOut(out)
	rootCmd.SetErr(errb)
	t.Cleanup(func() { rootCmd.SetOut(nil); rootCmd.SetErr(nil) })
	return out, errb
}

func TestRunNeedsTheDash(t *testing.T) {
	var errb bytes.Buffer
	rootCmd.SetErr(&errb)
	t.Cleanup(func() { rootCmd.SetErr(nil) })
	if code := run([]string{"run", "img", "echo"}); code == 0 {
		t.Error("run without -- succeeded")
	}
}

// TestRunWorkspaceGit: --workspace-git reaches the create request, the
// progress line names the clone, and a URL with credentials is refused
// before anything is created.
func TestRunWorkspaceGit(t *testing.T) {
	b := &runBackend{}
	sock := serveAPI(t, b)
	_, errb := captureCLI(t)
	t.Cleanup(func() { runFlags.gitURL = "" })

	const repo = "https://git.example.test/org/repo.git"
	run([]string{"run", "--socket", sock, "--workspace-git", repo, "img", "--", "true"})
	if b.created.WorkspaceGit != repo {
		t.Errorf("create request workspace_git = %q, want %q", b.created.WorkspaceGit, repo)
	}
	if !strings.Contains(errb.String(), "cloning "+repo+" into /workspace through the proxy") {
		t.Errorf("no clone progress line:\n%s", errb.String())
	}

	b.created = client.CreateRequest{}
	errb.Reset()
	code := run([]string{"run", "--socket", sock, "--workspace-git", "https://u:tok@git.example.test/r.git", "img", "--", "true"})
	if code == 0 || b.created.Image != "" {
		t.Errorf("a URL with credentials: exit %d, create request %+v", code, b.created)
	}
	req := client.CreateRequest{}
	if err := setWorkspaceGit(&req, "https://u:tok@git.example.test/r.git"); err == nil ||
		!strings.Contains(err.Error(), "credentials") || strings.Contains(err.Error(), "tok@") {
		t.Errorf("setWorkspaceGit with credentials: %v", err)
	}
	req.Workspace = "/srv/ws"
	if err := setWorkspaceGit(&req, repo); err == nil {
		t.Error("--workspace and --workspace-git together were accepted")
	}
}

// TestRunTemplate: --template reaches the create request in place of an
// image, and the sandbox line names the version it came from.
func TestRunTemplate(t *testing.T) {
	b := &runBackend{}
	sock := serveAPI(t, b)
	out, errb := captureCLI(t)
	t.Cleanup(func() { runFlags.template = "" })

	code := run([]string{"run", "--socket", sock, "--template", "py:v2", "--", "sh", "-c", "exit 7"})
	if code != 7 {
		t.Errorf("exit code = %d, want the command's 7\nstderr:\n%s", code, errb.String())
	}
	if b.created.Template != "py:v2" || b.created.Image != "" {
		t.Errorf("create request = %+v, want template py:v2 and no image", b.created)
	}
	if strings.Join(b.argv, " ") != "sh -c exit 7" || out.String() != "out\n" {
		t.Errorf("argv = %q, stdout = %q", b.argv, out.String())
	}
	for _, want := range []string{"creating sandbox from template py:v2", "sandbox sb1 (template py:v2, policy coding-agent"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
}

// TestRunImageOrTemplate: IMAGE and --template together, or neither, is a
// usage error (exit 2) that says which, and nothing is created.
func TestRunImageOrTemplate(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--template", "py", "localhost/airlock/debian:12", "--", "true"},
			"IMAGE localhost/airlock/debian:12 and --template py exclude each other"},
		{[]string{"run", "--", "true"}, "no IMAGE and no --template"},
		{[]string{"run", "--template", "py", "img", "extra", "--", "true"}, "more than one argument before --"},
		{[]string{"run", "--template", "py", "true"}, "put the command after --"},
		{[]string{"run", "img", "--"}, "put the command after --"},
	} {
		var errb bytes.Buffer
		rootCmd.SetErr(&errb)
		args := append([]string{"run", "--socket", filepath.Join(t.TempDir(), "none.sock")}, c.args[1:]...)
		code := run(args)
		rootCmd.SetErr(nil)
		runFlags.template = ""
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("airlock %s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), code, errb.String(), c.want)
		}
	}
}

// TestRunLockfile: `airlock run --lockfile` sends each file by content
// under the path given, as `sandbox create --lockfile` does; a missing one
// is named and nothing is created.
func TestRunLockfile(t *testing.T) {
	b := &runBackend{}
	sock := serveAPI(t, b)
	_, errb := captureCLI(t)
	t.Cleanup(func() { runFlags.lockfiles = nil })
	lock := filepath.Join(t.TempDir(), "requirements.txt")
	body := "idna==3.6 --hash=sha256:" + strings.Repeat("ab", 32) + "\n"
	if err := os.WriteFile(lock, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"run", "--socket", sock, "--lockfile", lock, "img", "--", "true"}); code != 7 {
		t.Fatalf("exit code = %d, want the command's 7\nstderr:\n%s", code, errb.String())
	}
	if got := b.created.Lockfiles; len(got) != 1 || got[0].Name != lock || got[0].Content != body {
		t.Errorf("create request lockfiles = %+v", got)
	}
	runFlags.lockfiles = nil
	b.created = client.CreateRequest{}
	missing := filepath.Join(t.TempDir(), "missing.lock")
	if code := run([]string{"run", "--socket", sock, "--lockfile", missing, "img", "--", "true"}); code == 0 || b.created.Image != "" ||
		!strings.Contains(errb.String(), "missing.lock") {
		t.Errorf("missing lockfile: exit %d, created %+v, stderr:\n%s", code, b.created, errb.String())
	}
}
