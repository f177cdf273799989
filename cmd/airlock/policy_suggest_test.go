//go:build !airlock_thin

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/audit"
)

func TestPolicySuggestAndReplay(t *testing.T) {
	now := time.Now()
	dir := seedAuditStore(t, logsFixture(now))
	sug := filepath.Join(t.TempDir(), "suggested.toml")
	cmd := newPolicySuggestCmd()
	cmd.SetArgs([]string{"--state-dir", dir, "--since", "3h", "-o", sug})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var out, errw bytes.Buffer
	if err := policyCheck(&out, &errw, []string{sug}, true); err != nil {
		b, _ := os.ReadFile(sug)
		t.Fatalf("suggested policy fails check: %v\n%s\n%s", err, errw.String(), b)
	}
	out.Reset()
	if err := policyTest(&out, &errw, []string{sug}, testOptions{output: "text"}); err != nil {
		b, _ := os.ReadFile(sug)
		t.Fatalf("suggested policy fails its tests: %v\n%s\n%s", err, errw.String(), b)
	}
	text, _ := os.ReadFile(sug)
	if !strings.Contains(string(text), `"git.example.test"`) || !strings.Contains(string(text), "registry.example.test") ||
		strings.Contains(string(text), `"paste.example.test"`) {
		t.Errorf("suggested:\n%s", text)
	}

	replay := func(args ...string) (string, error) {
		c := newPolicyReplayCmd()
		var o bytes.Buffer
		c.SetOut(&o)
		c.SetErr(&o)
		c.SetArgs(append([]string{"--state-dir", dir, "--since", "24h"}, args...))
		err := c.Execute()
		return o.String(), err
	}
	if o, err := replay(sug, "--baseline", sug); err != nil || !strings.Contains(o, "no change") {
		t.Fatalf("same policy: %v\n%s", err, o)
	}
	locked := filepath.Join(t.TempDir(), "locked.toml")
	os.WriteFile(locked, []byte("version = 1\n"), 0o644)
	o, err := replay(locked, "--baseline", sug)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(o, "NEWLY DENIED") || !strings.Contains(o, "GET https://git.example.test/org/repo/info/refs") {
		t.Fatalf("locked vs suggested: %v\n%s", err, o)
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(bad, []byte("version = 2\n"), 0o644)
	if _, err := replay(bad); !errors.As(err, &ee) || ee.code != 2 {
		t.Fatalf("bad policy: %v", err)
	}
	c := newPolicySuggestCmd()
	c.SetArgs([]string{"--state-dir", dir, "--sandbox", "nobody"})
	if err := c.Execute(); !errors.Is(err, audit.ErrNothingToSuggest) {
		t.Fatalf("nothing recorded: %v", err)
	}
}

// TestPolicySuggestKeepsSourcePolicy: --policy keeps the source's [deny]
// and its git category's settings, and the output passes check --strict
// and its own tests.
func TestPolicySuggestKeepsSourcePolicy(t *testing.T) {
	dir := seedAuditStore(t, logsFixture(time.Now()))
	tmp := t.TempDir()
	src := filepath.Join(tmp, "p.toml")
	os.WriteFile(src, []byte("version = 1\n[deny]\nhosts = [\"paste.example.test\"]\n[categories.git]\nhosts = [\"*.example.test\"]\nrepos = [\"org/*\"]\n"), 0o644)
	sug := filepath.Join(tmp, "suggested.toml")
	cmd := newPolicySuggestCmd()
	cmd.SetArgs([]string{"--state-dir", dir, "--since", "3h", "--policy", src, "-o", sug})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(sug)
	var out, errw bytes.Buffer
	if err := policyCheck(&out, &errw, []string{sug}, true); err != nil {
		t.Fatalf("check --strict: %v\n%s\n%s", err, errw.String(), text)
	}
	if err := policyTest(&out, &errw, []string{sug}, testOptions{output: "text"}); err != nil {
		t.Fatalf("test: %v\n%s\n%s", err, errw.String(), text)
	}
	for _, want := range []string{`hosts = ["paste.example.test"]`, `repos = ["org/*"]`, `hosts = ["git.example.test"]`} {
		if !strings.Contains(string(text), want) {
			t.Errorf("suggestion lacks %s:\n%s", want, text)
		}
	}
	for body, want := range map[string]string{
		"version = 2\n": "does not load",
		"version = 1\n[categories.public_web]\nhosts = [\"*.co.uk\"]\n": "has warnings",
	} {
		bad := newPolicySuggestCmd()
		os.WriteFile(src, []byte(body), 0o644)
		bad.SetArgs([]string{"--state-dir", dir, "--since", "3h", "--policy", src})
		bad.SetOut(&out)
		bad.SetErr(&errw)
		if err := bad.Execute(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--policy %q: %v, want %q", body, err, want)
		}
	}
}
