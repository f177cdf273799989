//go:build !airlock_thin

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/certs"
)

func runCA(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newCACmd()
	cmd.SilenceUsage = true // as under rootCmd
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	cmd.SetContext(context.Background())
	err := cmd.Execute()
	return out.String(), err
}

func TestCAExportAndRotate(t *testing.T) {
	dir := t.TempDir()
	first, err := runCA(t, "init", "--state-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first, "-----BEGIN CERTIFICATE-----") || strings.Contains(first, "PRIVATE") {
		t.Fatalf("export printed %q", first)
	}
	again, err := runCA(t, "export", "--state-dir", dir)
	if err != nil || again != first {
		t.Fatalf("export differs from what init printed (%v)", err)
	}
	if _, err := runCA(t, "init", "--state-dir", dir); err == nil || !strings.Contains(err.Error(), "a CA already exists") {
		t.Fatalf("a second init: %v, want a refusal", err)
	}
	if now, _ := runCA(t, "export", "--state-dir", dir); now != first {
		t.Fatal("a refused init replaced the CA")
	}
	rotated, err := runCA(t, "rotate", "--state-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	if rotated == first || !strings.HasPrefix(rotated, "-----BEGIN CERTIFICATE-----") {
		t.Fatal("rotate did not print a new certificate")
	}
	after, _ := runCA(t, "export", "--state-dir", dir)
	if after != rotated {
		t.Fatal("export after rotate does not show the rotated CA")
	}
	if err := os.Chmod(filepath.Join(dir, certs.KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runCA(t, "export", "--state-dir", dir); err == nil {
		t.Fatal("export accepted a world-readable key")
	}
}

// TestCAExportNeverCreates: export and rotate on a mistyped or empty state
// directory are errors that name the fix, and leave no CA behind (users.md
// S11: export minted a CA in ./no-such-dir).
func TestCAExportNeverCreates(t *testing.T) {
	empty := t.TempDir()
	missing := filepath.Join(empty, "no-such-dir")
	for _, tc := range []struct{ verb, dir string }{
		{"export", missing}, {"export", empty}, {"rotate", missing}, {"rotate", empty},
	} {
		out, err := runCA(t, tc.verb, "--state-dir", tc.dir)
		if err == nil || !strings.Contains(err.Error(), "airlock ca init") || out != "" {
			t.Errorf("%s --state-dir %s: out %q, err %v; want an error naming ca init", tc.verb, tc.dir, out, err)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("%s was created (%v)", missing, err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("%s holds %v", empty, ents)
	}
}
