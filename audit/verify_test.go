package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
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
