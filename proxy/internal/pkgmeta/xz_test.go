package pkgmeta

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand"
	"os/exec"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ulikunitz/xz"
)

// xzText is some compressible text and some that is not (the encoder
// stores it in uncompressed chunks).
func xzText() []byte {
	var b bytes.Buffer
	for i := range 3000 {
		fmt.Fprintf(&b, "Package: p%d\nVersion: 1.%d\nFilename: pool/main/p/p%d.deb\n\n", i, i, i)
	}
	noise := make([]byte, 200<<10)
	rand.New(rand.NewSource(1)).Read(noise)
	b.Write(noise)
	return b.Bytes()
}

func xzWith(t *testing.T, c xz.WriterConfig, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := c.NewWriter(&b)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func readXZ(doc []byte, max int64) ([]byte, error) {
	r, err := newXZReader(iotest.HalfReader(bytes.NewReader(doc)), max)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// TestXZReader: documents written by the xz package (each check type,
// many blocks, two streams with padding between) and by the real xz
// tool read back whole.
func TestXZReader(t *testing.T) {
	data := xzText()
	docs := map[string][]byte{
		"crc32":         xzWith(t, xz.WriterConfig{CheckSum: xz.CRC32}, data),
		"crc64":         xzWith(t, xz.WriterConfig{CheckSum: xz.CRC64}, data),
		"sha256":        xzWith(t, xz.WriterConfig{CheckSum: xz.SHA256}, data),
		"none":          xzWith(t, xz.WriterConfig{NoCheckSum: true}, data),
		"blocks of 64K": xzWith(t, xz.WriterConfig{BlockSize: 64 << 10}, data),
		"empty":         xzWith(t, xz.WriterConfig{}, nil),
	}
	half := len(data) / 2
	two := append(xzWith(t, xz.WriterConfig{}, data[:half]), 0, 0, 0, 0, 0, 0, 0, 0)
	docs["two streams"] = append(two, xzWith(t, xz.WriterConfig{CheckSum: xz.SHA256}, data[half:])...)
	for name, doc := range docs {
		got, err := readXZ(doc, MaxXZDict)
		want := data
		if name == "empty" {
			want = nil
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes of %d, %v", name, len(got), len(want), err)
		}
	}
	xzTool, err := exec.LookPath("xz")
	if err != nil {
		t.Skip("the xz tool is not installed: only the xz package's documents were read")
	}
	for _, args := range [][]string{{"-6"}, {"-9e", "--check=sha256"}, {"-1", "-T2", "--block-size=100KiB", "--check=crc32"}, {"-0", "--check=none"}} {
		cmd := exec.Command(xzTool, append(args, "-c")...)
		cmd.Stdin = bytes.NewReader(data)
		doc, err := cmd.Output()
		if err != nil {
			t.Fatalf("xz %v: %v", args, err)
		}
		if got, err := readXZ(doc, MaxXZDict); err != nil || !bytes.Equal(got, data) {
			t.Errorf("xz %v: %d bytes of %d, %v", args, len(got), len(data), err)
		}
	}
}

// setDict sets the dictionary code of the block header at offset at,
// and fixes its CRC32.
func setDict(t *testing.T, doc []byte, at int, code byte) []byte {
	t.Helper()
	out := bytes.Clone(doc)
	n := (int(out[at]) + 1) * 4
	if out[at+2] != 0x21 || out[at+3] != 1 {
		t.Fatalf("no LZMA2 filter at %d: % x", at, out[at:at+n])
	}
	out[at+4] = code
	binary.LittleEndian.PutUint32(out[at+n-4:], crc32.ChecksumIEEE(out[at:at+n-4]))
	return out
}

// TestXZReaderHostile: a block asking for a dictionary over the cap
// (the first block, or a later one) is refused before its decoder is
// made, with the place; truncated and corrupt documents are errors.
func TestXZReaderHostile(t *testing.T) {
	data := xzText()
	doc := xzWith(t, xz.WriterConfig{}, data)
	for name, tc := range map[string]struct {
		doc  []byte
		max  int64
		want string
	}{
		"4 GiB dictionary": {setDict(t, doc, 12, 40), MaxXZDict, "xz: byte 24: block 1 header: LZMA2 dictionary of 4294967295 bytes, over the 67108864 allowed"},
		"over a low cap":   {doc, 1 << 20, "block 1 header: LZMA2 dictionary of 8388608 bytes, over the 1048576 allowed"},
		"bad dict code":    {setDict(t, doc, 12, 41), MaxXZDict, "block 1 header: lzma: invalid dictionary size"},
		"header CRC":       {append(doc[:12:12], append([]byte{doc[12], doc[13], doc[14], doc[15] ^ 1}, doc[16:]...)...), MaxXZDict, "block 1 header: CRC32 mismatch"},
		"corrupt data":     {flip(doc, len(doc)/2), MaxXZDict, "xz: byte"},
		"no magic":         {append([]byte{0}, doc[1:]...), MaxXZDict, "xz: byte 12: not an xz stream header"},
	} {
		got, err := readXZ(tc.doc, tc.max)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %d bytes, %v; want %s", name, len(got), err, tc.want)
		}
	}
	// The second of two blocks asks for 4 GiB.
	multi := xzWith(t, xz.WriterConfig{BlockSize: 64 << 10}, data)
	second := secondBlock(t, multi)
	if _, err := readXZ(setDict(t, multi, second, 40), MaxXZDict); err == nil || !strings.Contains(err.Error(), "block 2 header: LZMA2 dictionary of 4294967295 bytes") {
		t.Errorf("second block of 4 GiB: %v", err)
	}
	// Many blocks of big dictionaries and little data.
	var many bytes.Buffer
	for i := range 10 {
		many.Write(xzWith(t, xz.WriterConfig{}, data[i*1000:(i+1)*1000]))
	}
	if _, err := readXZ(many.Bytes(), MaxXZDict); err == nil || !strings.Contains(err.Error(), "block 1 header: dictionaries of 75497472 bytes for 8000 bytes decompressed, over the 67116864 allowed") {
		t.Errorf("many big dictionaries: %v", err)
	}
	for cut := 0; cut < len(doc); cut += len(doc)/40 + 1 {
		if got, err := readXZ(doc[:cut], MaxXZDict); err == nil {
			t.Fatalf("cut at %d of %d: read %d bytes, no error", cut, len(doc), len(got))
		}
	}
}

func flip(b []byte, i int) []byte {
	out := bytes.Clone(b)
	out[i] ^= 0x55
	return out
}

// secondBlock finds the second block's header in a document of blocks
// without size fields: after the first block's chunks, padding and check.
func secondBlock(t *testing.T, doc []byte) int {
	t.Helper()
	x, err := newXZReader(bytes.NewReader(doc), MaxXZDict)
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	for len(x.recs) == 0 {
		if _, err := x.Read(b[:]); err != nil {
			t.Fatal(err)
		}
	}
	return int(12 + x.recs[0][0] + (4-x.recs[0][0]%4)%4)
}

// TestXZStreaming: the document is read as it comes, whatever the reads'
// sizes.
func TestXZStreaming(t *testing.T) {
	data := xzText()[:50000]
	doc := xzWith(t, xz.WriterConfig{BlockSize: 8 << 10, CheckSum: xz.CRC32}, data)
	r, err := newXZReader(iotest.OneByteReader(bytes.NewReader(doc)), MaxXZDict)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(iotest.OneByteReader(r))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("read one byte at a time: %d bytes of %d, or different", len(got), len(data))
	}
}
