package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadLockfiles: --lockfile files are read before the request goes:
// a missing one is named with its path; the others are sent by content
// under the path given (the appliance judges the content:
// serve's TestSandboxLockfiles).
func TestReadLockfiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("requirements.txt", "idna==3.6 --hash=sha256:"+strings.Repeat("ab", 32)+"\n")
	uv := write("deps.lock", "version = 1\n\n[[package]]\nname = \"idna\"\nversion = \"3.6\"\nsdist = { url = \"x\", hash = \"sha256:"+strings.Repeat("cd", 32)+"\" }\n")
	files, err := readLockfiles([]string{good, uv})
	if err != nil || len(files) != 2 || files[0].Name != good || !strings.HasPrefix(files[1].Content, "version = 1") {
		t.Fatalf("good lockfiles: %+v %v", files, err)
	}
	if _, err := readLockfiles([]string{filepath.Join(dir, "missing.lock")}); err == nil || !strings.Contains(err.Error(), "missing.lock") {
		t.Errorf("missing lockfile: %v", err)
	}
	if files, err := readLockfiles(nil); files != nil || err != nil {
		t.Errorf("none: %v %v", files, err)
	}
}
