package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTarRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "a.txt"), []byte("hello"), 0o644)
	var buf bytes.Buffer
	if err := writeTar(&buf, src); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := extractTar(&buf, dst); err != nil {
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
		err := extractTar(&buf, filepath.Join(dir, "out"))
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
	err := extractTar(&buf, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "link/") {
		t.Errorf("write through an escaping symlink: %v", err)
	}
}

func TestSplitRemote(t *testing.T) {
	for in, want := range map[string]bool{"3f2a:/workspace": true, "./x": false, "/abs": false, "C:/x": true, "a.b:/x": false, "id:rel": false} {
		if _, _, ok := splitRemote(in); ok != want {
			t.Errorf("splitRemote(%q) ok = %v, want %v", in, ok, want)
		}
	}
}
