package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/serve"
)

// TestActionsNamePrincipal: on a real appliance with two principals, every
// action alice takes on her sandbox (create, exec, a file written, a
// directory made, a file removed, pause, resume, reset, a shell session,
// destroy) is a lifecycle or exec record naming her, each change of state
// a record with the state it enters; the admin's pause and resume name the
// admin; bob's attempts on her sandbox are refused (not_found, a refusal
// record) and no record of an action names him.
func TestActionsNamePrincipal(t *testing.T) {
	requireAppliance(t)
	all := []string{serve.ScopeCreate, serve.ScopeExec, serve.ScopeFiles, serve.ScopeAttach, serve.ScopeLogs}
	a := startApplianceWith(t, startWorld(t), "act", func(cfg string) string { return cfg },
		principalsFile([]principalSpec{{name: "alice", scopes: all}, {name: "bob", scopes: all}}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	alice, bob := a.as(t, "alice"), a.as(t, "bob")
	sb, err := alice.Create(ctx, client.CreateRequest{Image: serve.DefaultImage})
	if err != nil {
		t.Fatal(err)
	}
	gone := false
	t.Cleanup(func() {
		if !gone {
			a.c.Delete(context.Background(), sb.ID)
		}
	})
	if sb.State != client.StateRunning || sb.Owner != "alice" {
		t.Errorf("created: state %q owner %q", sb.State, sb.Owner)
	}
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err = alice.Exec(ctx, sb.ID, client.ExecRequest{Shell: "echo alice-was-here"}, io.Discard, io.Discard)
	step("exec", err)
	_, err = alice.WriteFile(ctx, sb.ID, "/tmp/note", 0o644, 5, strings.NewReader("hello"))
	step("write a file", err)
	step("mkdir", alice.Mkdir(ctx, sb.ID, "/tmp/dir", false))
	step("remove", alice.Remove(ctx, sb.ID, "/tmp/note", false))
	step("pause", alice.Pause(ctx, sb.ID))
	if got, err := alice.Get(ctx, sb.ID); err != nil || got.State != client.StatePaused {
		t.Errorf("after pause: state %q %v", got.State, err)
	}
	if _, err := alice.Exec(ctx, sb.ID, client.ExecRequest{Shell: "true"}, io.Discard, io.Discard); !client.IsCode(err, client.CodeConflict) {
		t.Errorf("exec in a paused sandbox: %v, want conflict", err)
	}
	step("resume", alice.Resume(ctx, sb.ID))
	step("admin pause", a.c.Pause(ctx, sb.ID))
	step("admin resume", a.c.Resume(ctx, sb.ID))
	_, err = alice.Reset(ctx, sb.ID)
	step("reset", err)
	_, err = alice.Shell(ctx, sb.ID, client.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo shell-ok"}, Rows: 24, Cols: 80},
		bytes.NewReader(nil), io.Discard, nil)
	step("shell", err)

	for what, call := range map[string]func() error{
		"exec": func() error {
			_, err := bob.Exec(ctx, sb.ID, client.ExecRequest{Shell: "true"}, io.Discard, io.Discard)
			return err
		},
		"pause":  func() error { return bob.Pause(ctx, sb.ID) },
		"resume": func() error { return bob.Resume(ctx, sb.ID) },
		"write": func() error {
			_, err := bob.WriteFile(ctx, sb.ID, "/tmp/bob", 0o644, 1, strings.NewReader("b"))
			return err
		},
		"reset":   func() error { _, err := bob.Reset(ctx, sb.ID); return err },
		"destroy": func() error { return bob.Delete(ctx, sb.ID) },
	} {
		if err := call(); !client.IsCode(err, client.CodeNotFound) {
			t.Errorf("bob %s on alice's sandbox: %v, want not_found", what, err)
		}
	}
	waitRefusal(t, a, "bob", "DELETE /v1/sandboxes/"+sb.ID, "another principal", 404)
	waitRefusal(t, a, "bob", "POST /v1/sandboxes/"+sb.ID+"/resume", "another principal", 404)

	step("destroy", alice.Delete(ctx, sb.ID))
	gone = true
	evs := sandboxRecords(t, a, sb.ID)
	var got []string
	for _, e := range evs {
		switch {
		case e.Lifecycle != nil && e.Lifecycle.Principal != "":
			l := e.Lifecycle
			line := fmt.Sprintf("%s %s by %s", l.Stage, l.State, l.Principal)
			for _, c := range l.Changes {
				line += " " + c.Op + ":" + c.Path
			}
			got = append(got, line)
		case e.Lifecycle != nil:
			t.Errorf("a lifecycle record of an action names nobody: %s %s %q", e.Lifecycle.Stage, e.Lifecycle.State, e.Lifecycle.Detail)
		case e.Exec != nil && e.Exec.Stage == "requested":
			got = append(got, fmt.Sprintf("exec %s by %s", strings.Join(e.Exec.Argv, " "), e.Exec.Principal))
		}
	}
	want := []string{
		"created creating by alice", "started creating by alice", "ready running by alice",
		"exec /bin/sh -c echo alice-was-here by alice",
		"files running by alice written:/tmp/note", "files running by alice added:/tmp/dir", "files running by alice deleted:/tmp/note",
		"paused paused by alice", "resumed running by alice", "paused paused by local", "resumed running by local",
		"reset running by alice", "exec /bin/sh -c echo shell-ok by alice",
		"ending ending by alice", "destroyed ended by alice",
	}
	if !slices.Equal(got, want) {
		t.Errorf("the sandbox's action records:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// sandboxRecords waits for a sandbox's end record and returns its
// records, oldest first (they reach the store a moment after the answer).
func sandboxRecords(t *testing.T, a *sdkAppliance, id string) []audit.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var evs []audit.Event
		err := a.c.Logs(context.Background(), client.LogQuery{Sandbox: id}, func(e audit.Event) error {
			evs = append(evs, e)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 {
			if l := evs[len(evs)-1].Lifecycle; l != nil && l.Stage == "destroyed" {
				return evs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no end record of %s after 30 s (%d records)", id, len(evs))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
