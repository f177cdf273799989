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
	first, err := runCA(t, "export", "--state-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first, "-----BEGIN CERTIFICATE-----") || strings.Contains(first, "PRIVATE") {
		t.Fatalf("export printed %q", first)
	}
	again, err := runCA(t, "export", "--state-dir", dir)
	if err != nil || again != first {
		t.Fatalf("second export differs (%v)", err)
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
