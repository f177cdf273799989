package pkgmeta

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ulikunitz/xz"
)

// TestReadDebianPackagesHostile: a line over MaxDebianLine, an index
// over the bound, an xz index asking for a dictionary over MaxXZDict and
// a truncated compressed index are errors that say where; an error the
// callback returns ends the reading.
func TestReadDebianPackagesHostile(t *testing.T) {
	long := debIndex + "Package: c\nDescription: " + strings.Repeat("x", MaxDebianLine) + "\n"
	xzIndex := xzWith(t, xz.WriterConfig{}, []byte(debIndex))
	for name, tc := range map[string]struct {
		doc  []byte
		max  int64
		want string
	}{
		"long line":      {[]byte(long), 4 << 20, "debian index line 13: longer than 1048576 bytes"},
		"over the bound": {[]byte(debIndex + debIndex), int64(len(debIndex)) + 10, fmt.Sprintf("over %d bytes uncompressed (at line 12)", len(debIndex)+10)},
		"xz dictionary":  {setDict(t, xzIndex, 12, 40), 1 << 20, "debian index line 1: xz: byte 24: block 1 header: LZMA2 dictionary of 4294967295 bytes, over the 67108864 allowed"},
		"truncated xz":   {xzIndex[:len(xzIndex)-8], 1 << 20, "debian index line 12: xz: byte"},
	} {
		var got []DebianFile
		err := ReadDebianPackages(bytes.NewReader(tc.doc), tc.max, func(f DebianFile) error { got = append(got, f); return nil })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %s", name, err, tc.want)
		}
	}
	stop := errors.New("enough")
	err := ReadDebianPackages(strings.NewReader(debIndex+debIndex), 1<<20, func(DebianFile) error { return stop })
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "debian index line 7: enough") {
		t.Errorf("callback error: %v", err)
	}
}

// TestReadDebianPackagesStreaming: read a byte at a time, compressed or
// not, an index gives what it gives read whole.
func TestReadDebianPackagesStreaming(t *testing.T) {
	var plain strings.Builder
	for range 500 {
		plain.WriteString(debIndex)
	}
	for name, doc := range map[string][]byte{"plain": []byte(plain.String()), "xz": xzWith(t, xz.WriterConfig{BlockSize: 4 << 10, DictCap: 1 << 20}, []byte(plain.String()))} {
		var whole, streamed []DebianFile
		if err := DebianPackages(doc, 1<<20, func(f DebianFile) { whole = append(whole, f) }); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err := ReadDebianPackages(iotest.OneByteReader(bytes.NewReader(doc)), 1<<20, func(f DebianFile) error { streamed = append(streamed, f); return nil })
		if err != nil || len(whole) != 500 || len(streamed) != len(whole) || streamed[499] != whole[499] {
			t.Errorf("%s: %d files whole, %d streamed, %v", name, len(whole), len(streamed), err)
		}
	}
}
