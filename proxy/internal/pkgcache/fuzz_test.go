package pkgcache

import (
	"testing"
	"time"
)

// FuzzIndexLine: a journal line never panics the decoder, and one that
// decodes encodes back to a line that decodes the same.
func FuzzIndexLine(f *testing.F) {
	m := &Meta{SRI: "sha512-AAAA", Name: "left-pad", Version: "1.3.0", Size: 10, Stored: time.Unix(1700000000, 0).UTC()}
	m.Key = Key("", m.SRI)
	for _, r := range []record{{Op: opPut, Meta: m}, {Op: opDel, Key: m.Key}, {Op: opUse, Key: m.Key, At: time.Unix(1700000001, 0).UTC()}} {
		line, _ := encodeRecord(r)
		f.Add(line[:len(line)-1])
	}
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := decodeRecord(line)
		if err != nil {
			return
		}
		again, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeRecord(again[:len(again)-1]); err != nil {
			t.Fatalf("re-encoded line does not decode: %v", err)
		}
	})
}
