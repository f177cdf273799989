package audit

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// chainFiles writes 3 sample sets (45 records) rotated into several files
// and returns the files, newest-rotated first as a shell glob would not
// order them.
func chainFiles(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StreamPath: stream, StreamMaxBytes: 4000, StreamMaxFiles: 50})
	for range 3 {
		for _, e := range sampleEvents() {
			p.Emit(e)
		}
	}
	flush(t, p)
	p.Close()
	files, _ := filepath.Glob(stream + "*")
	if len(files) < 3 {
		t.Fatalf("want several rotated files, got %v", files)
	}
	return files
}

// fileWithSeq finds the file holding seq and the line index of it.
func fileWithSeq(t *testing.T, files []string, seq uint64) (string, int) {
	t.Helper()
	for _, f := range files {
		for i, e := range decodeLines(t, readLines(t, f)) {
			if e.Seq == seq {
				return f, i
			}
		}
	}
	t.Fatalf("seq %d not found", seq)
	return "", 0
}

func TestVerifyIntactAcrossRotation(t *testing.T) {
	files := chainFiles(t)
	slices.Reverse(files)
	res, err := Verify(files...)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || res.Records != 45 || res.LastSeq != 45 || len(res.Notes) != 3 {
		t.Fatalf("%+v", res)
	}
	lines := readLines(t, fileWithSeqPath(t, files, 45))
	if res.FinalHash != HashLine(lines[len(lines)-1]) {
		t.Errorf("final hash %s is not the last record's hash", res.FinalHash)
	}
}

func fileWithSeqPath(t *testing.T, files []string, seq uint64) string {
	f, _ := fileWithSeq(t, files, seq)
	return f
}

func TestVerifyFindsTampering(t *testing.T) {
	cases := []struct {
		name   string
		seq    uint64 // the record tampered with
		tamper func(lines [][]byte, i int) [][]byte
		kind   string
		atSeq  uint64 // where the problem is reported
		line   int    // offset from the tampered line index (1-based report)
	}{
		{"edited", 20, func(l [][]byte, i int) [][]byte {
			l[i] = bytes.Replace(l[i], []byte(`"sb-1"`), []byte(`"sb-9"`), 1)
			return l
		}, "modified", 20, 1},
		{"deleted", 20, func(l [][]byte, i int) [][]byte {
			return slices.Delete(l, i, i+1)
		}, "deleted", 21, 1},
		{"reordered", 20, func(l [][]byte, i int) [][]byte {
			l[i], l[i+1] = l[i+1], l[i]
			return l
		}, "reordered", 20, 2},
		{"not json", 20, func(l [][]byte, i int) [][]byte {
			l[i] = []byte("garbage")
			return l
		}, "invalid", 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := chainFiles(t)
			f, i := fileWithSeq(t, files, tc.seq)
			if n := len(readLines(t, f)); i+1 >= n {
				t.Fatalf("seq %d is the last line of its file; pick another", tc.seq)
			}
			writeLines(t, f, tc.tamper(readLines(t, f), i))
			res, err := Verify(files...)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK() {
				t.Fatal("tampering not detected")
			}
			var found bool
			for _, p := range res.Problems {
				if p.Kind == tc.kind && p.File == f && p.Line == i+tc.line && (tc.atSeq == 0 || p.Seq == tc.atSeq) {
					found = true
				}
			}
			if !found {
				t.Errorf("want a %q problem at %s:%d, got:\n%v", tc.kind, f, i+tc.line, res.Problems)
			}
		})
	}
}

func TestVerifyMissingFile(t *testing.T) {
	files := chainFiles(t)
	sort := func(a, b string) int { return strings.Compare(a, b) }
	slices.SortFunc(files, sort)
	// events.jsonl.2 is in the middle of the chain.
	var mid string
	for _, f := range files {
		if strings.HasSuffix(f, ".2") {
			mid = f
		}
	}
	rest := slices.DeleteFunc(slices.Clone(files), func(f string) bool { return f == mid })
	res, err := Verify(rest...)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() || res.Problems[0].Kind != "deleted" {
		t.Fatalf("a missing middle file is not reported as deleted records: %+v", res.Problems)
	}
	if _, err := Verify(filepath.Join(t.TempDir(), "absent.jsonl")); !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("absent file: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// A tail cut off with its end records passes the chain check on the files
// alone (only a note says a sandbox has no end), and fails against the
// store's end records (users.md §1 "Tamper evidence": "Tail truncation
// passes as ok").
func TestVerifyTruncatedTail(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StateDir: dir, StreamPath: stream})
	for _, sb := range []string{"sb-1", "sb-2"} {
		for _, e := range sampleEvents() {
			if e.Sandbox != "" {
				e.Sandbox = sb
			}
			p.Emit(e)
		}
	}
	flush(t, p)
	p.Close()
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	anchors, err := st.EndAnchors(t.Context())
	if err != nil || len(anchors) != 2 || anchors[1].Sandbox != "sb-2" || anchors[1].Seq != 30 || anchors[1].LastSeq != 28 {
		t.Fatalf("anchors: %v %+v", err, anchors)
	}
	lines := readLines(t, stream)

	intact, err := VerifyAnchored(anchors, stream)
	if err != nil || !intact.OK() {
		t.Fatalf("intact against the store: %v %+v", err, intact.Problems)
	}
	for _, tc := range []struct {
		name string
		keep int
		want string
	}{
		{"end record cut", 29, "truncated: the chain ends at seq 29, before sandbox sb-2's end record (seq 30, store)"},
		{"records and end cut", 20, "truncated: the chain ends at seq 20, but sandbox sb-2's end record (seq 30, store) says its records run to seq 28"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cut := filepath.Join(t.TempDir(), "events.jsonl")
			writeLines(t, cut, lines[:tc.keep])
			alone, err := Verify(cut)
			if err != nil || !alone.OK() || !strings.Contains(strings.Join(alone.Notes, "\n"), "no end record here for sb-2") {
				t.Fatalf("files alone: %v %+v %q", err, alone.Problems, alone.Notes)
			}
			res, err := VerifyAnchored(anchors, cut)
			if err != nil || res.OK() {
				t.Fatalf("against the store: %v ok=%v", err, res.OK())
			}
			got := res.Problems[0].String()
			if !strings.Contains(got, tc.want) || !strings.HasPrefix(got, cut+":"+strconv.Itoa(tc.keep)+": ") {
				t.Errorf("got %q, want %q at %s:%d", got, tc.want, cut, tc.keep)
			}
		})
	}
	// The end record in the files vouches for its sandbox's last record.
	edited := filepath.Join(t.TempDir(), "events.jsonl")
	mod := slices.Clone(lines)
	mod[27] = bytes.Replace(mod[27], []byte(`"sb-2"`), []byte(`"sb-9"`), 1)
	writeLines(t, edited, mod[:30])
	res, err := Verify(edited)
	if err != nil || !strings.Contains(fmt.Sprint(res.Problems), "does not hash to the final_hash in sandbox sb-2's end record (seq 30, "+edited+":30)") {
		t.Fatalf("edited last record: %v %+v", err, res.Problems)
	}
}

// A rotated file compressed by a log rotator is verified as it is.
func TestVerifyReadsGzip(t *testing.T) {
	files := chainFiles(t)
	raw, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	os.Remove(files[1])
	files[1] += ".gz"
	if err := os.WriteFile(files[1], gz.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Verify(files...)
	if err != nil || !res.OK() || res.Records != 45 {
		t.Fatalf("with %s compressed: %v %+v", files[1], err, res.Problems)
	}
}
