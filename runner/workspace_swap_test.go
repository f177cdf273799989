package runner

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTarEntrySwappedForSymlink: a sandbox that swaps a walked directory
// for a symlink to a host directory between the walk's lstat and the open
// must not get the host file's contents into the tar.
func TestTarEntrySwappedForSymlink(t *testing.T) {
	base := t.TempDir()
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "host")
	for _, d := range []string{filepath.Join(ws, "a"), outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "a", "f"), []byte("sandbox"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "f"), []byte("HOST-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(ws, "a"))
	if err != nil || len(ents) != 1 {
		t.Fatalf("readdir: %v %v", ents, err)
	}
	d := fs.FileInfoToDirEntry(mustInfo(t, ents[0]))
	if err := os.RemoveAll(filepath.Join(ws, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "a")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err = tarEntry(tw, root, filepath.Join(ws, "a", "f"), filepath.Join("a", "f"), d)
	tw.Flush()
	if strings.Contains(buf.String(), "HOST-") {
		t.Fatalf("tar holds the host file's contents (err %v)", err)
	}
	if err == nil {
		t.Fatal("tarEntry followed a swapped-in symlink without an error")
	}
}

func mustInfo(t *testing.T, e fs.DirEntry) fs.FileInfo {
	t.Helper()
	fi, err := e.Info()
	if err != nil {
		t.Fatal(err)
	}
	return fi
}
