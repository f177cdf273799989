package runner

import (
	"archive/tar"
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func tarOf(t *testing.T, prefix string, files map[string]string) map[string]entry {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if prefix != "" {
		tw.WriteHeader(&tar.Header{Name: prefix + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	}
	for name, body := range files {
		if prefix != "" {
			name = prefix + "/" + name
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	idx, err := indexTar(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestDiffTrees(t *testing.T) {
	old := tarOf(t, "", map[string]string{
		"keep.txt": "same\n",
		"mod.txt":  "a\nb\nc\nd\ne\nf\ng\nh\n",
		"gone.txt": "bye\n",
		"bin.dat":  "\x00\x01",
	})
	cur := tarOf(t, "workspace", map[string]string{
		"keep.txt": "same\n",
		"mod.txt":  "a\nb\nC\nd\ne\nf\ng\nh\nadded",
		"new.txt":  "hello\n",
		"bin.dat":  "\x00\x02",
	})
	d := diffTrees(old, cur)
	wantChanges := []Change{
		{Path: "bin.dat", Kind: "modified", Binary: true, Size: 2},
		{Path: "gone.txt", Kind: "deleted"},
		{Path: "mod.txt", Kind: "modified", Size: 21},
		{Path: "new.txt", Kind: "added", Size: 6},
	}
	if diff := cmp.Diff(wantChanges, d.Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	wantPatch := `Binary files a/bin.dat and b/bin.dat differ
--- a/gone.txt
+++ /dev/null
@@ -1,1 +0,0 @@
-bye
--- a/mod.txt
+++ b/mod.txt
@@ -1,8 +1,9 @@
 a
 b
-c
+C
 d
 e
 f
 g
 h
+added
\ No newline at end of file
--- /dev/null
+++ b/new.txt
@@ -0,0 +1,1 @@
+hello
`
	if diff := cmp.Diff(wantPatch, d.Patch); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
}

func TestLineDiffSeparateHunks(t *testing.T) {
	var a, b []string
	for i := range 30 {
		line := string(rune('a'+i%26)) + "\n"
		a = append(a, line)
		b = append(b, line)
	}
	b[2] = "X\n"
	b[25] = "Y\n"
	got := unified("f", "modified", []byte(join(a)), []byte(join(b)))
	want := "--- a/f\n+++ b/f\n" +
		"@@ -1,6 +1,6 @@\n a\n b\n-c\n+X\n d\n e\n f\n" +
		"@@ -23,7 +23,7 @@\n w\n x\n y\n-z\n+Y\n a\n b\n c\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func join(s []string) string {
	var b bytes.Buffer
	for _, l := range s {
		b.WriteString(l)
	}
	return b.String()
}

func FuzzLineDiff(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\nd\n")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, a, b string) {
		al, bl := splitLines([]byte(a)), splitLines([]byte(b))
		ops := lineDiff(al, bl)
		// Applying the edit script to a must give b.
		var got []string
		for _, o := range ops {
			switch o.kind {
			case ' ':
				if al[o.i] != bl[o.j] {
					t.Fatalf("keep of unequal lines %q %q", al[o.i], bl[o.j])
				}
				got = append(got, al[o.i])
			case '+':
				got = append(got, bl[o.j])
			}
		}
		if join(got) != join(bl) {
			t.Fatalf("script rebuilds %q, want %q", join(got), b)
		}
	})
}

// FuzzIndexTar feeds arbitrary bytes as a sandbox's /workspace tar stream
// (the sandbox controls it): no panic, and a tree never differs from itself.
func FuzzIndexTar(f *testing.F) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "workspace/a.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	tw.Write([]byte("hi\n"))
	tw.WriteHeader(&tar.Header{Name: "../../etc/x", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"})
	tw.Close()
	f.Add(buf.Bytes())
	f.Add([]byte("not a tar"))
	maxHashed = 64 << 10 // sparse entries can claim huge sizes cheaply
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, err := indexTar(bytes.NewReader(b))
		if err != nil {
			return
		}
		for name := range idx {
			if name == "" || name[0] == '/' || name == ".." || len(name) > 2 && name[:3] == "../" {
				t.Fatalf("name %q escapes the workspace", name)
			}
		}
		if d := diffTrees(idx, idx); len(d.Changes) != 0 || d.Patch != "" {
			t.Fatalf("a tree differs from itself: %+v", d)
		}
	})
}
