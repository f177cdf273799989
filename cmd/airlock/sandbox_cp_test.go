package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/internal/tardir"
)

func TestTarRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "a.txt"), []byte("hello"), 0o644)
	var buf bytes.Buffer
	if err := tardir.Write(&buf, src, "proj"); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := extractAll(&buf, dst); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dst, "proj", "sub", "a.txt"))
	if err != nil || string(b) != "hello" {
		t.Fatalf("round trip: %q, %v", b, err)
	}
}

func TestExtractRefusesEscapes(t *testing.T) {
	for _, name := range []string{"../evil", "/etc/evil", "a/../../evil"} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
		tw.Write([]byte("x"))
		tw.Close()
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, "out"), 0o755)
		err := extractAll(&buf, filepath.Join(dir, "out"))
		if err == nil {
			t.Errorf("%s: extracted", name)
		}
		if _, serr := os.Stat(filepath.Join(dir, "evil")); serr == nil {
			t.Errorf("%s: wrote outside the destination", name)
		}
	}
	// A symlink pointing out, then a file through it.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "link", Linkname: "/tmp", Typeflag: tar.TypeSymlink})
	tw.WriteHeader(&tar.Header{Name: "link/escaped-" + filepath.Base(t.TempDir()), Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("x"))
	tw.Close()
	err := extractAll(&buf, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "link/") {
		t.Errorf("write through an escaping symlink: %v", err)
	}
}

// extractAll unpacks every entry of an archive under dir, names unchanged.
func extractAll(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	first, err := tr.Next()
	if err != nil {
		return err
	}
	return extractTar(tr, first, dir, func(n string) (string, bool) { return n, true })
}

// podman cp's rules, for both directions (the real Podman run is
// e2e/cp_test.go).
func TestPlanCopy(t *testing.T) {
	for _, tc := range []struct {
		name            string
		srcDir, content bool
		dst             string
		dstKind, parent kind
		want            copyPlan
		err             string
	}{
		{name: "file onto a new path", dst: "/w/f.py", dstKind: kindNone, parent: kindDir, want: copyPlan{"/w", "f.py"}},
		{name: "file onto a file", dst: "/w/f.py", dstKind: kindFile, want: copyPlan{"/w", "f.py"}},
		{name: "file into a dir", dst: "/w/sub", dstKind: kindDir, want: copyPlan{"/w/sub", "src.py"}},
		{name: "file into a dir/", dst: "/w/sub/", dstKind: kindDir, want: copyPlan{"/w/sub", "src.py"}},
		{name: "file onto a new dir/", dst: "/w/new/", dstKind: kindNone, parent: kindDir, err: "directory /w/new/ does not exist"},
		{name: "file under a missing parent", dst: "/w/no/f.py", dstKind: kindNone, parent: kindNone, err: "directory /w/no does not exist"},
		{name: "file onto file/", dst: "/w/f.py/", dstKind: kindFile, err: "/w/f.py/ is not a directory"},
		{name: "dir into a dir", srcDir: true, dst: "/w", dstKind: kindDir, want: copyPlan{"/w", "src.py"}},
		{name: "dir contents into a dir", srcDir: true, content: true, dst: "/w", dstKind: kindDir, want: copyPlan{"/w", ""}},
		{name: "dir onto a new path", srcDir: true, dst: "/w/copy", dstKind: kindNone, parent: kindDir, want: copyPlan{"/w", "copy"}},
		{name: "dir onto a new path/", srcDir: true, dst: "/w/copy/", dstKind: kindNone, parent: kindDir, want: copyPlan{"/w", "copy"}},
		{name: "dir onto a file", srcDir: true, dst: "/w/f.py", dstKind: kindFile, err: "cannot copy a directory onto the file /w/f.py"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planCopy("src.py", tc.srcDir, tc.content, tc.dst, tc.dstKind, tc.parent)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestRenameTop(t *testing.T) {
	for _, tc := range []struct {
		name, top, to, want string
		ok                  bool
	}{
		{"out.txt", "out.txt", "new.txt", "new.txt", true},
		{"d/", "d", "copy", "copy", true},
		{"d/a/b", "d", "copy", "copy/a/b", true},
		{"d/a", "d", "d", "d/a", true},
		{"d", "d", "", "", false},
		{"d/a", "d", "", "a", true},
		{"other/a", "d", "copy", "", false},
		{"./d/a", "d", "x", "x/a", true},
	} {
		got, ok := renameTop(tc.name, tc.top, tc.to)
		if got != tc.want || ok != tc.ok {
			t.Errorf("renameTop(%q, %q, %q) = %q, %v; want %q, %v", tc.name, tc.top, tc.to, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSplitRemote(t *testing.T) {
	for in, want := range map[string]bool{"3f2a:/workspace": true, "./x": false, "/abs": false, "C:/x": true, "a.b:/x": false, "id:rel": false} {
		if _, _, ok := splitRemote(in); ok != want {
			t.Errorf("splitRemote(%q) ok = %v, want %v", in, ok, want)
		}
	}
}
