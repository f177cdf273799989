package pkgmeta

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// A Debian Packages index lists, per binary package, its Filename under
// the archive root and the SHA256 of that file; apt checks a .deb
// against it (and the index against the signed Release). The index
// carries no publish time of a package. It comes plain or compressed
// (apt asks for .xz first, then .gz; by-hash paths do not say which),
// so the compression is told by the first bytes.

// DebianFile is one .deb an index lists.
type DebianFile struct {
	Package, Version, Filename string
	Integrity                  string // "sha256-BASE64"
}

// ErrNotPackages: the document is no Packages index.
var ErrNotPackages = errors.New("not a Debian Packages index")

// MaxDebianLine bounds one line of a Packages index (the longest real
// ones, a Rust library's Provides, are some 100 KB).
const MaxDebianLine = 1 << 20

// DebianPackages reads a Packages index held whole; see
// ReadDebianPackages.
func DebianPackages(doc []byte, max int64, f func(DebianFile)) error {
	return ReadDebianPackages(bytes.NewReader(doc), max, func(d DebianFile) error { f(d); return nil })
}

// ReadDebianPackages reads a Packages index (plain, gzip, xz or bzip2)
// from r as it comes, at most max bytes of it uncompressed, and calls f
// for each stanza with a Filename and a SHA256; an error f returns ends
// the reading and is returned, wrapped. A document that is no Packages
// index (a Release file, a Translation, Contents) is an error, as is one
// over max, a line over MaxDebianLine, or an xz block whose dictionary is
// over MaxXZDict.
func ReadDebianPackages(r io.Reader, max int64, f func(DebianFile) error) error {
	dr, err := decompress(r)
	if err != nil {
		return err
	}
	cr := &capReader{r: dr, left: max}
	sc := bufio.NewScanner(cr)
	sc.Buffer(make([]byte, 0, 64<<10), MaxDebianLine)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if atEOF && cr.failed && bytes.IndexByte(data, '\n') < 0 {
			return 0, nil, nil // a read failed: the line it cut is not read
		}
		return bufio.ScanLines(data, atEOF)
	})
	s := debStanzas{f: f}
	for sc.Scan() {
		s.n++
		if err := s.line(bytes.TrimRight(sc.Bytes(), "\r")); err != nil {
			return err
		}
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return fmt.Errorf("debian index line %d: longer than %d bytes", s.n+1, MaxDebianLine)
	case errors.Is(err, errOverMax):
		return fmt.Errorf("debian index: over %d bytes uncompressed (at line %d)", max, s.n+1)
	case err != nil:
		return fmt.Errorf("debian index line %d: %w", s.n+1, err)
	}
	if err := s.flush(); err != nil {
		return err
	}
	if s.stanzas == 0 {
		return ErrNotPackages
	}
	return nil
}

var errOverMax = errors.New("over the bound")

// capReader fails once more than left bytes came, and tells whether a
// read failed.
type capReader struct {
	r      io.Reader
	left   int64
	failed bool
}

func (c *capReader) Read(b []byte) (int, error) {
	if int64(len(b)) > c.left+1 {
		b = b[:c.left+1]
	}
	n, err := c.r.Read(b)
	if int64(n) > c.left {
		n, err = int(c.left), errOverMax
	}
	c.left -= int64(n)
	c.failed = c.failed || err != nil && err != io.EOF
	return n, err
}

// debStanzas reads an index line by line.
type debStanzas struct {
	f          func(DebianFile) error
	cur        DebianFile
	sha        string
	n, stanzas int
}

func (s *debStanzas) flush() error {
	cur, sha := s.cur, s.sha
	s.cur, s.sha = DebianFile{}, ""
	if cur.Filename == "" || sha == "" {
		return nil
	}
	if cur.Integrity = HexSRI("sha256", sha); cur.Integrity == "" {
		return nil
	}
	s.stanzas++
	if err := s.f(cur); err != nil {
		return fmt.Errorf("debian index line %d: %w", s.n, err)
	}
	return nil
}

func (s *debStanzas) line(line []byte) error {
	switch {
	case len(line) == 0:
		return s.flush()
	case line[0] == ' ' || line[0] == '\t': // a continuation
		return nil
	}
	k, v, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		if s.stanzas == 0 {
			return fmt.Errorf("debian index line %d: %w", s.n, ErrNotPackages)
		}
		return fmt.Errorf("debian index line %d: want \"Field: value\"", s.n)
	}
	v = bytes.TrimSpace(v)
	switch {
	case bytes.EqualFold(k, []byte("package")):
		s.cur.Package = string(v)
	case bytes.EqualFold(k, []byte("version")):
		s.cur.Version = string(v)
	case bytes.EqualFold(k, []byte("filename")):
		s.cur.Filename = string(v)
	case bytes.EqualFold(k, []byte("sha256")):
		s.sha = string(v)
	}
	return nil
}

// decompress tells the compression by the first bytes.
func decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(len(xzMagic))
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("debian index: %w", err)
	}
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("debian index: gzip: %w", err)
		}
		return zr, nil
	case bytes.HasPrefix(head, xzMagic):
		xr, err := newXZReader(br, MaxXZDict)
		if err != nil {
			return nil, fmt.Errorf("debian index: %w", err)
		}
		return xr, nil
	case bytes.HasPrefix(head, []byte("BZh")):
		return bzip2.NewReader(br), nil
	}
	return br, nil
}
