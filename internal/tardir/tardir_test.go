package tardir

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestEntrySwappedForSymlink: a sandbox that swaps a walked directory
// for a symlink to a host directory between the walk's lstat and the open
// must not get the host file's contents into the tar.
func TestEntrySwappedForSymlink(t *testing.T) {
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
	fi := mustInfo(t, ents[0])
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
	err = entry(tw, root, filepath.Join(ws, "a", "f"), filepath.Join("a", "f"), "a/f", fi)
	tw.Flush()
	if strings.Contains(buf.String(), "HOST-") {
		t.Fatalf("tar holds the host file's contents (err %v)", err)
	}
	if err == nil {
		t.Fatal("entry followed a swapped-in symlink without an error")
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

// list reads a tar stream back as "name type mode uid:gid [-> link | =contents]".
func list(t *testing.T, b []byte) []string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%s %c %o %d:%d", h.Name, h.Typeflag, h.Mode&0o777, h.Uid, h.Gid)
		switch h.Typeflag {
		case tar.TypeSymlink:
			line += " -> " + h.Linkname
		case tar.TypeReg:
			c, _ := io.ReadAll(tr)
			line += " =" + string(c)
		}
		out = append(out, line)
	}
}

// Write names a tree's entries under top (or relative to it), keeps
// symbolic links as links, skips other special files, leaves owners out,
// and writes a single file as one entry.
func TestWrite(t *testing.T) {
	src := filepath.Join(t.TempDir(), "proj")
	for _, d := range []string{filepath.Join(src, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(src, 0o755)
	if err := os.WriteFile(filepath.Join(src, "sub", "a.txt"), []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(filepath.Join(src, "sub", "a.txt"), 1234, 1234); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		src, top string
		want     []string
	}{
		{src, "proj", []string{"proj/ 5 755 0:0", "proj/link 2 777 0:0 -> /etc/passwd", "proj/sub/ 5 755 0:0", "proj/sub/a.txt 0 640 0:0 =hello"}},
		{src, "", []string{"link 2 777 0:0 -> /etc/passwd", "sub/ 5 755 0:0", "sub/a.txt 0 640 0:0 =hello"}},
		{filepath.Join(src, "sub", "a.txt"), "b.txt", []string{"b.txt 0 640 0:0 =hello"}},
		{filepath.Join(src, "sub", "a.txt"), "", []string{"a.txt 0 640 0:0 =hello"}},
		{filepath.Join(src, "link"), "l", []string{"l 2 777 0:0 -> /etc/passwd"}},
	} {
		var buf bytes.Buffer
		if err := Write(&buf, c.src, c.top); err != nil {
			t.Fatalf("Write(%s, %q): %v", c.src, c.top, err)
		}
		if got := list(t, buf.Bytes()); !slices.Equal(got, c.want) {
			t.Errorf("Write(%s, %q):\n%s\nwant\n%s", c.src, c.top, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
	if err := Write(io.Discard, filepath.Join(src, "missing"), ""); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing source: %v", err)
	}
}
