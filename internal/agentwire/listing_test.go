package agentwire

import (
	"fmt"
	"strings"
	"testing"
)

// TestChunkEntries: 20,000 entries (about 2.4 MB of JSON, more than one
// frame holds) come back whole and in order from frames each under
// ListChunk; long names and link targets do not break the bound.
func TestChunkEntries(t *testing.T) {
	var fs []FileInfo
	for i := range 20000 {
		fi := FileInfo{Name: fmt.Sprintf("entry-%05d-%s", i, strings.Repeat("n", i%200)), Size: int64(i), Type: "file", Mode: 0o644}
		if i%1000 == 0 {
			fi.Type, fi.Symlink = "symlink", strings.Repeat("\x01", MaxPath) // escaped 6x in JSON
		}
		fs = append(fs, fi)
	}
	chunks, err := ChunkEntries(fs)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 2 {
		t.Fatalf("20000 entries in %d frame(s), want several", len(chunks))
	}
	var got []FileInfo
	for i, c := range chunks {
		if len(c) > ListChunk || len(c) > MaxData {
			t.Fatalf("frame %d is %d bytes, over %d", i, len(c), ListChunk)
		}
		part, err := DecodeEntries(c)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		got = append(got, part...)
	}
	if len(got) != len(fs) {
		t.Fatalf("got %d entries back, want %d", len(got), len(fs))
	}
	for i := range fs {
		if got[i] != fs[i] {
			t.Fatalf("entry %d: %+v, want %+v", i, got[i], fs[i])
		}
	}
	if c, err := ChunkEntries(nil); err != nil || len(c) != 0 {
		t.Errorf("no entries: %d frames, %v", len(c), err)
	}
}

func TestDecodeEntriesRefuses(t *testing.T) {
	for name, p := range map[string]string{
		"unknown field": `[{"name":"a","evil":1}]`,
		"not an array":  `{"name":"a"}`,
		"trailing":      `[] []`,
		"too big":       "[" + strings.Repeat(" ", ListChunk) + "]",
	} {
		if _, err := DecodeEntries([]byte(p)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecodeEntries(f *testing.F) {
	f.Add([]byte(`[{"name":"a","size":1,"mode":420,"type":"file","mod_ns":0,"uid":0,"gid":0}]`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, p []byte) {
		fs, err := DecodeEntries(p)
		if err != nil {
			return
		}
		chunks, err := ChunkEntries(fs)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		n := 0
		for _, c := range chunks {
			part, err := DecodeEntries(c)
			if err != nil {
				t.Fatalf("re-decode: %v", err)
			}
			n += len(part)
		}
		if n != len(fs) {
			t.Fatalf("re-encoded %d entries as %d", len(fs), n)
		}
	})
}

// TestSockOwnerCheck: an agent's answer naming an exec id that is not
// one, a long or control-laden process name, or a negative pid is refused.
func TestSockOwnerCheck(t *testing.T) {
	good := SockOwner{Inode: 1, Pid: 7, ExecID: "e-1_x", Comm: "python3"}
	if err := good.Check(); err != nil {
		t.Fatalf("a good answer: %v", err)
	}
	for name, s := range map[string]SockOwner{
		"exec id":  {ExecID: "../../x"},
		"long":     {Comm: strings.Repeat("c", MaxComm+1)},
		"control":  {Comm: "cu\x1b[2Jrl"},
		"negative": {Pid: -1},
	} {
		if err := s.Check(); err == nil {
			t.Errorf("%s: accepted %+v", name, s)
		}
	}
}
