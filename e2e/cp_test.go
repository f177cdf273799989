package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSandboxCpPodmanSemantics drives `airlock sandbox cp` against a real
// Podman sandbox with podman cp's rules: a file onto a new path is written
// at that path (it used to become a directory /workspace/f.py/), onto a
// file overwrites it, into a directory keeps its name; a directory into a
// directory keeps its name, onto a new path becomes that path; and the
// same rules on the way out.
func TestSandboxCpPodmanSemantics(t *testing.T) {
	requireAppliance(t)
	bin := airlockBinary(t)
	w := startWorld(t)
	a := startAppliance(t, w)
	s := a.newSandbox(t, false)
	host := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(host, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("f.py", "print('one')\n")
	write("f2.py", "print('two')\n")
	write("proj/a.txt", "a\n")
	write("proj/inner/b.txt", "b\n")
	cp := func(src, dst string) (string, error) {
		cmd := exec.Command(bin, "sandbox", "cp", src, dst)
		cmd.Env = append(os.Environ(), "AIRLOCK_SOCKET="+a.socket)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	must := func(src, dst string) {
		t.Helper()
		if out, err := cp(src, dst); err != nil {
			t.Fatalf("cp %s %s: %v\n%s", src, dst, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	in := func(what, script string) {
		t.Helper()
		r, err := s.run(ctx, script, nil)
		if err != nil || r.code != 0 {
			t.Errorf("%s: `%s`: %v exit %d\n%s", what, script, err, r.code, r.output())
		}
	}
	id := s.id + ":"
	if r, err := s.run(ctx, "mkdir -p /workspace/sub", nil); err != nil || r.code != 0 {
		t.Fatalf("mkdir: %v %+v", err, r)
	}

	must(filepath.Join(host, "f.py"), id+"/workspace/f.py")
	in("a file onto a new path is that file", `test -f /workspace/f.py && [ "$(cat /workspace/f.py)" = "print('one')" ]`)
	must(filepath.Join(host, "f2.py"), id+"/workspace/f.py")
	in("a file onto a file overwrites it", `[ "$(cat /workspace/f.py)" = "print('two')" ]`)
	must(filepath.Join(host, "f.py"), id+"/workspace/sub")
	in("a file into a directory keeps its name", `test -f /workspace/sub/f.py`)
	must(filepath.Join(host, "proj"), id+"/workspace/")
	in("a directory into a directory keeps its name", `test -f /workspace/proj/a.txt && test -f /workspace/proj/inner/b.txt`)
	must(filepath.Join(host, "proj"), id+"/workspace/copy")
	in("a directory onto a new path becomes it", `test -f /workspace/copy/a.txt && test -f /workspace/copy/inner/b.txt && ! test -e /workspace/copy/proj`)
	if out, err := cp(filepath.Join(host, "f.py"), id+"/workspace/nodir/f.py"); err == nil || !strings.Contains(out, "/workspace/nodir does not exist") {
		t.Errorf("a file under a missing directory: %v %q, want an error naming /workspace/nodir", err, out)
	}
	if out, err := cp(filepath.Join(host, "proj"), id+"/workspace/f.py"); err == nil || !strings.Contains(out, "onto the file /workspace/f.py") {
		t.Errorf("a directory onto a file: %v %q, want an error", err, out)
	}

	out := t.TempDir()
	must(id+"/workspace/f.py", filepath.Join(out, "g.py"))
	if b, err := os.ReadFile(filepath.Join(out, "g.py")); err != nil || string(b) != "print('two')\n" {
		t.Errorf("out: a file onto a new path: %q %v", b, err)
	}
	must(id+"/workspace/f.py", out+"/")
	if fi, err := os.Stat(filepath.Join(out, "f.py")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("out: a file into a directory: %v", err)
	}
	must(id+"/workspace/proj", out)
	if _, err := os.Stat(filepath.Join(out, "proj/inner/b.txt")); err != nil {
		t.Errorf("out: a directory into a directory: %v", err)
	}
	must(id+"/workspace/proj", filepath.Join(out, "newcopy"))
	if _, err := os.Stat(filepath.Join(out, "newcopy/inner/b.txt")); err != nil {
		t.Errorf("out: a directory onto a new path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "newcopy/proj")); err == nil {
		t.Error("out: a directory onto a new path was nested under it")
	}
}
