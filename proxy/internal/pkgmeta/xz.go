package pkgmeta

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"

	"github.com/ulikunitz/xz/lzma"
)

// An xz document (file format 1.0.4) is streams of blocks, each block a
// header naming its filters and its LZMA2 dictionary size, then LZMA2
// chunks. The LZMA2 decoder allocates the whole dictionary the header
// asks for (up to 4 GiB) before the first byte, and xz.ReaderConfig's
// DictCap is a floor, not a cap. So the framing is read here: every block
// header is checked against a cap before its decoder is made, and each
// decoder (lzma.Reader2) reads exactly its block's chunks, so no block
// header can reach it unchecked. Each block allocates its own
// dictionary: beyond the first max bytes, the dictionaries a document
// asks for must be paid for by what it decompressed (xz -T's blocks are
// three dictionaries long), or a document of many empty blocks would
// have a 64 MiB allocation every 16 bytes.

// MaxXZDict is the largest LZMA2 dictionary an xz document may ask for:
// 64 MiB, what xz -9 uses (Debian's indices use 8 MiB).
const MaxXZDict = 64 << 20

var xzMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0}

// xzSrc is the compressed document, with the offset of its next byte.
type xzSrc struct {
	br  *bufio.Reader
	off int64
}

func (s *xzSrc) full(b []byte) error {
	n, err := io.ReadFull(s.br, b)
	s.off += int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return fmt.Errorf("xz: byte %d: %w", s.off, err)
	}
	return nil
}

func (s *xzSrc) read(n int) ([]byte, error) {
	b := make([]byte, n)
	return b, s.full(b)
}

func (s *xzSrc) errf(format string, a ...any) error {
	return fmt.Errorf("xz: byte %d: "+format, append([]any{s.off}, a...)...)
}

// varint reads an xz multibyte integer (at most 9 bytes), into h too.
func (s *xzSrc) varint(h hash.Hash) (uint64, error) {
	var v uint64
	var b [1]byte
	for i := 0; i < 9; i++ {
		if err := s.full(b[:]); err != nil {
			return 0, err
		}
		h.Write(b[:])
		v |= uint64(b[0]&0x7f) << (7 * i)
		if b[0]&0x80 == 0 {
			return v, nil
		}
	}
	return 0, s.errf("integer longer than 9 bytes")
}

// xzReader decompresses an xz document.
type xzReader struct {
	src   *xzSrc
	max   int64
	check byte        // the stream's check type
	blk   *xzBlock    // the block being read, or nil
	recs  [][2]uint64 // the stream's blocks so far: unpadded and uncompressed size
	dicts int64       // dictionary bytes allocated
	out   int64       // bytes decompressed
	err   error
}

type xzBlock struct {
	lz           *lzma.Reader2
	chunks       *lzma2Chunks
	sum          hash.Hash
	hdrLen       int64
	size         uint64 // uncompressed so far
	wantC, wantU int64  // from the header, or -1
}

// newXZReader reads the first stream header; a block may ask for a
// dictionary of at most max bytes.
func newXZReader(r io.Reader, max int64) (*xzReader, error) {
	x := &xzReader{src: &xzSrc{br: bufio.NewReader(r)}, max: max}
	if err := x.streamHeader(); err != nil {
		return nil, err
	}
	return x, nil
}

func (x *xzReader) Read(p []byte) (int, error) {
	for x.err == nil && len(p) > 0 {
		if x.blk == nil {
			x.err = x.next()
			continue
		}
		n, err := x.blk.lz.Read(p)
		x.blk.sum.Write(p[:n])
		x.blk.size += uint64(n)
		x.out += int64(n)
		switch {
		case err == io.EOF:
			err = x.endBlock()
		case err != nil:
			err = x.src.errf("block %d: %w", len(x.recs)+1, err)
		}
		x.err = err
		if n > 0 {
			return n, nil
		}
	}
	return 0, x.err
}

// checkLen is the length of a check type's value (xz format 2.1.1.2).
func checkLen(t byte) int {
	if t == 0 {
		return 0
	}
	return 4 << ((t - 1) / 3)
}

func newCheck(t byte) hash.Hash {
	switch t {
	case 0:
		return nopHash{}
	case 1:
		return crc32.NewIEEE()
	case 4:
		return crc64.New(crc64.MakeTable(crc64.ECMA))
	case 10:
		return sha256.New()
	}
	return nil
}

// nopHash is the check type None.
type nopHash struct{}

func (nopHash) Write(b []byte) (int, error) { return len(b), nil }
func (nopHash) Sum(b []byte) []byte         { return b }
func (nopHash) Reset()                      {}
func (nopHash) Size() int                   { return 0 }
func (nopHash) BlockSize() int              { return 1 }

// checkValue is a check as the document stores it: CRCs little-endian.
func checkValue(t byte, h hash.Hash) []byte {
	b := h.Sum(nil)
	if t == 1 || t == 4 {
		for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
			b[i], b[j] = b[j], b[i]
		}
	}
	return b
}

func (x *xzReader) streamHeader() error {
	h, err := x.src.read(12)
	if err != nil {
		return err
	}
	if !bytes.Equal(h[:6], xzMagic) {
		return x.src.errf("not an xz stream header")
	}
	if h[6] != 0 || h[7]&0xf0 != 0 || crc32.ChecksumIEEE(h[6:8]) != binary.LittleEndian.Uint32(h[8:]) {
		return x.src.errf("bad stream flags")
	}
	if newCheck(h[7]) == nil {
		return x.src.errf("check type %d is not read", h[7])
	}
	x.check, x.recs = h[7], nil
	return nil
}

// next starts the next block, or reads the index, the stream footer and
// padding and the next stream's header; io.EOF at the document's end.
func (x *xzReader) next() error {
	b, err := x.src.read(1)
	if err != nil {
		return err
	}
	if b[0] != 0 {
		return x.startBlock(b[0])
	}
	if err := x.index(); err != nil {
		return err
	}
	if err := x.padding(); err != nil {
		return err
	}
	if _, err := x.src.br.Peek(1); err == io.EOF {
		return io.EOF
	}
	return x.streamHeader()
}

func (x *xzReader) startBlock(size byte) error {
	n := (int(size) + 1) * 4
	h := make([]byte, n)
	h[0] = size
	if err := x.src.full(h[1:]); err != nil {
		return err
	}
	bn := len(x.recs) + 1
	if crc32.ChecksumIEEE(h[:n-4]) != binary.LittleEndian.Uint32(h[n-4:]) {
		return x.src.errf("block %d header: CRC32 mismatch", bn)
	}
	flags := h[1]
	if flags&0x3f != 0 {
		return x.src.errf("block %d header: flags 0x%02x: only one filter (LZMA2) is read", bn, flags)
	}
	blk := &xzBlock{sum: newCheck(x.check), hdrLen: int64(n), wantC: -1, wantU: -1}
	rest := h[2 : n-4]
	for _, f := range []struct {
		bit  byte
		into *int64
	}{{0x40, &blk.wantC}, {0x80, &blk.wantU}} {
		if flags&f.bit != 0 {
			v, k := binary.Uvarint(rest)
			if k <= 0 || k > 9 || v > 1<<62 {
				return x.src.errf("block %d header: bad size", bn)
			}
			*f.into, rest = int64(v), rest[k:]
		}
	}
	dict, err := x.lzma2Dict(bn, rest)
	if err != nil {
		return err
	}
	blk.chunks = &lzma2Chunks{src: x.src}
	if blk.lz, err = (lzma.Reader2Config{DictCap: int(dict)}).NewReader2(blk.chunks); err != nil {
		return x.src.errf("block %d: %w", bn, err)
	}
	x.blk = blk
	return nil
}

// lzma2Dict reads a block header's filter flags and padding: one LZMA2
// filter whose dictionary is at most x.max.
func (x *xzReader) lzma2Dict(bn int, rest []byte) (int64, error) {
	if len(rest) < 3 || rest[0] != 0x21 || rest[1] != 1 {
		return 0, x.src.errf("block %d header: only the LZMA2 filter (0x21) is read", bn)
	}
	dict, err := lzma.DecodeDictCap(rest[2])
	if err != nil {
		return 0, x.src.errf("block %d header: %w", bn, err)
	}
	if dict > x.max {
		return 0, x.src.errf("block %d header: LZMA2 dictionary of %d bytes, over the %d allowed", bn, dict, x.max)
	}
	if dict < lzma.MinDictCap {
		dict = lzma.MinDictCap
	}
	if x.dicts+dict > x.max+x.out {
		return 0, x.src.errf("block %d header: dictionaries of %d bytes for %d bytes decompressed, over the %d allowed", bn, x.dicts+dict, x.out, x.max+x.out)
	}
	x.dicts += dict
	for _, c := range rest[3:] {
		if c != 0 {
			return 0, x.src.errf("block %d header: padding not zero", bn)
		}
	}
	return dict, nil
}

// endBlock checks that the decoder read the block's chunks whole, and
// reads its padding and check.
func (x *xzReader) endBlock() error {
	blk, bn := x.blk, len(x.recs)+1
	x.blk = nil
	if !blk.chunks.end || blk.chunks.left > 0 || len(blk.chunks.pend) > 0 {
		return x.src.errf("block %d: LZMA2 data ends inside a chunk", bn)
	}
	c := blk.chunks.n
	if blk.wantC >= 0 && blk.wantC != c || blk.wantU >= 0 && uint64(blk.wantU) != blk.size {
		return x.src.errf("block %d: sizes differ from its header's", bn)
	}
	pad, err := x.src.read(int((4 - (blk.hdrLen+c)%4) % 4))
	if err != nil {
		return err
	}
	if !bytes.Equal(pad, make([]byte, len(pad))) {
		return x.src.errf("block %d: padding not zero", bn)
	}
	sum, err := x.src.read(checkLen(x.check))
	if err != nil {
		return err
	}
	if !bytes.Equal(sum, checkValue(x.check, blk.sum)) {
		return x.src.errf("block %d: check mismatch", bn)
	}
	x.recs = append(x.recs, [2]uint64{uint64(blk.hdrLen+c) + uint64(len(sum)), blk.size})
	return nil
}

// index reads the stream's index (its indicator byte already read) and
// footer, and checks them against the blocks read.
func (x *xzReader) index() error {
	h := crc32.NewIEEE()
	h.Write([]byte{0})
	start := x.src.off - 1
	n, err := x.src.varint(h)
	if err != nil {
		return err
	}
	if n != uint64(len(x.recs)) {
		return x.src.errf("index: %d records for %d blocks", n, len(x.recs))
	}
	for i, rec := range x.recs {
		for _, want := range rec {
			v, err := x.src.varint(h)
			if err != nil {
				return err
			}
			if v != want {
				return x.src.errf("index: record %d differs from its block", i+1)
			}
		}
	}
	pad, err := x.src.read(int((4 - (x.src.off-start)%4) % 4))
	if err != nil {
		return err
	}
	h.Write(pad)
	crc, err := x.src.read(4)
	if err != nil {
		return err
	}
	if !bytes.Equal(pad, make([]byte, len(pad))) || binary.LittleEndian.Uint32(crc) != h.Sum32() {
		return x.src.errf("index: padding or CRC32 mismatch")
	}
	return x.footer(x.src.off - start)
}

func (x *xzReader) footer(indexLen int64) error {
	f, err := x.src.read(12)
	if err != nil {
		return err
	}
	if crc32.ChecksumIEEE(f[4:10]) != binary.LittleEndian.Uint32(f[:4]) || string(f[10:]) != "YZ" ||
		f[8] != 0 || f[9] != x.check || (int64(binary.LittleEndian.Uint32(f[4:8]))+1)*4 != indexLen {
		return x.src.errf("bad stream footer")
	}
	return nil
}

// padding skips stream padding: zero bytes, four at a time.
func (x *xzReader) padding() error {
	for {
		b, err := x.src.br.Peek(1)
		if err != nil || b[0] != 0 {
			return nil
		}
		pad, err := x.src.read(4)
		if err != nil {
			return err
		}
		if !bytes.Equal(pad, make([]byte, 4)) {
			return x.src.errf("stream padding not zero")
		}
	}
}

var errLZMA2Control = errors.New("bad LZMA2 chunk control byte")

// lzma2Chunks hands a block's LZMA2 chunks to its decoder and ends after
// the end marker: it reads each chunk's header to know where the chunk
// ends, whatever the decoder makes of the bytes.
type lzma2Chunks struct {
	src  *xzSrc
	pend []byte // the rest of a chunk header read
	left int    // bytes of the chunk's data not yet handed on
	end  bool   // the end marker was handed on
	n    int64  // bytes handed on
}

func (c *lzma2Chunks) Read(p []byte) (int, error) {
	if len(c.pend) == 0 && c.left == 0 {
		if c.end {
			return 0, io.EOF
		}
		if err := c.header(); err != nil {
			return 0, err
		}
	}
	var n int
	if len(c.pend) > 0 {
		n = copy(p, c.pend)
		c.pend = c.pend[n:]
	} else {
		if len(p) > c.left {
			p = p[:c.left]
		}
		var err error
		n, err = c.src.br.Read(p)
		c.src.off += int64(n)
		c.left -= n
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			c.n += int64(n)
			return n, err
		}
	}
	c.n += int64(n)
	return n, nil
}

// header reads a chunk header (LZMA2: 0x00 end; 0x01, 0x02 stored, two
// bytes of size-1; 0x80-0xff compressed, two more bytes of unpacked size,
// two of packed size-1, a properties byte from 0xc0).
func (c *lzma2Chunks) header() error {
	h, err := c.src.read(1)
	if err != nil {
		return err
	}
	switch ctl := h[0]; {
	case ctl == 0:
		c.end = true
	case ctl == 1 || ctl == 2:
		rest, err := c.src.read(2)
		if err != nil {
			return err
		}
		h, c.left = append(h, rest...), int(binary.BigEndian.Uint16(rest))+1
	case ctl >= 0x80:
		n := 4
		if ctl >= 0xc0 {
			n = 5
		}
		rest, err := c.src.read(n)
		if err != nil {
			return err
		}
		h, c.left = append(h, rest...), int(binary.BigEndian.Uint16(rest[2:4]))+1
	default:
		return c.src.errf("%w 0x%02x", errLZMA2Control, ctl)
	}
	c.pend = h
	return nil
}
