package pkgmeta

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ulikunitz/xz"
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

var errNotPackages = errors.New("not a Debian Packages index")

// DebianPackages reads a Packages index (plain, gzip, xz or bzip2), at
// most max bytes of it uncompressed, and calls f for each stanza with a
// Filename and a SHA256. A document that is no Packages index (a Release
// file, a Translation, Contents) is an error, as is one over max.
func DebianPackages(doc []byte, max int64, f func(DebianFile)) error {
	r, err := decompress(doc)
	if err != nil {
		return err
	}
	br := bufio.NewReader(io.LimitReader(r, max+1))
	var cur DebianFile
	var sha string
	n, read, stanzas := 0, int64(0), 0
	flush := func() {
		if cur.Filename != "" && sha != "" {
			if sri := HexSRI("sha256", sha); sri != "" {
				cur.Integrity = sri
				f(cur)
				stanzas++
			}
		}
		cur, sha = DebianFile{}, ""
	}
	for {
		line, err := br.ReadString('\n')
		read += int64(len(line))
		if read > max {
			return fmt.Errorf("debian index: over %d bytes", max)
		}
		n++
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			flush()
		case line[0] == ' ' || line[0] == '\t': // a continuation
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				if stanzas == 0 {
					return fmt.Errorf("debian index line %d: %w", n, errNotPackages)
				}
				return fmt.Errorf("debian index line %d: want \"Field: value\"", n)
			}
			v = strings.TrimSpace(v)
			switch strings.ToLower(k) {
			case "package":
				cur.Package = v
			case "version":
				cur.Version = v
			case "filename":
				cur.Filename = v
			case "sha256":
				sha = v
			}
		}
		if err == io.EOF {
			flush()
			break
		}
		if err != nil {
			return fmt.Errorf("debian index: %w", err)
		}
	}
	if stanzas == 0 {
		return errNotPackages
	}
	return nil
}

func decompress(doc []byte) (io.Reader, error) {
	switch {
	case bytes.HasPrefix(doc, []byte{0x1f, 0x8b}):
		r, err := gzip.NewReader(bytes.NewReader(doc))
		if err != nil {
			return nil, fmt.Errorf("debian index: gzip: %w", err)
		}
		return r, nil
	case bytes.HasPrefix(doc, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		r, err := xz.NewReader(bytes.NewReader(doc))
		if err != nil {
			return nil, fmt.Errorf("debian index: xz: %w", err)
		}
		return r, nil
	case bytes.HasPrefix(doc, []byte("BZh")):
		return bzip2.NewReader(bytes.NewReader(doc)), nil
	}
	return bytes.NewReader(doc), nil
}
