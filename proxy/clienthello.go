package proxy

import (
	"errors"
	"fmt"
)

// Limits for the ClientHello parser.
const (
	maxHandshakeLen = 1 << 16 // a ClientHello larger than this is refused
	recordHeaderLen = 5
	maxRecordLen    = 1<<14 + 256
)

// ErrNeedMore means the bytes seen so far are a valid prefix of a
// ClientHello but not all of it.
var ErrNeedMore = errors.New("proxy: clienthello incomplete")

// ErrNotTLS means the bytes do not start a TLS handshake.
var ErrNotTLS = errors.New("proxy: not a TLS handshake")

// Hello is what the proxy needs from a ClientHello.
type Hello struct {
	ServerName string   // SNI host_name, "" when absent
	ALPN       []string // offered protocols in order
}

// ParseClientHello parses a TLS ClientHello from the first bytes a client
// sent, reassembling the handshake message across TLS records (and so
// across TCP segments: call it again with more bytes after ErrNeedMore).
// It never panics on any input.
func ParseClientHello(data []byte) (Hello, error) {
	msg, err := reassemble(data)
	if err != nil {
		return Hello{}, err
	}
	return parseHelloBody(msg)
}

// reassemble concatenates handshake record payloads until the first
// handshake message is complete and returns that message's body.
func reassemble(data []byte) ([]byte, error) {
	var hs []byte
	for {
		if len(data) == 0 {
			return nil, ErrNeedMore
		}
		if data[0] != 22 {
			if hs == nil {
				return nil, ErrNotTLS
			}
			return nil, errors.New("proxy: clienthello: non-handshake record inside the handshake")
		}
		if len(data) < recordHeaderLen {
			return nil, ErrNeedMore
		}
		if data[1] != 3 {
			return nil, ErrNotTLS
		}
		n := int(data[3])<<8 | int(data[4])
		if n == 0 || n > maxRecordLen {
			return nil, fmt.Errorf("proxy: clienthello: bad record length %d", n)
		}
		if len(data) < recordHeaderLen+n {
			// Use the partial record only to fail early on a bad header.
			if err := checkPrefix(append(hs, data[recordHeaderLen:]...)); err != nil {
				return nil, err
			}
			return nil, ErrNeedMore
		}
		hs = append(hs, data[recordHeaderLen:recordHeaderLen+n]...)
		data = data[recordHeaderLen+n:]
		if err := checkPrefix(hs); err != nil {
			return nil, err
		}
		if len(hs) >= 4 {
			mlen := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
			if len(hs) >= 4+mlen {
				return hs[4 : 4+mlen], nil
			}
		}
	}
}

func checkPrefix(hs []byte) error {
	if len(hs) >= 1 && hs[0] != 1 {
		return fmt.Errorf("proxy: clienthello: handshake type %d, want client_hello", hs[0])
	}
	if len(hs) >= 4 {
		mlen := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if mlen > maxHandshakeLen {
			return fmt.Errorf("proxy: clienthello: length %d exceeds %d", mlen, maxHandshakeLen)
		}
	}
	return nil
}

// reader is a bounds-checked cursor.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() int {
	b := r.take(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (r *reader) u16() int {
	b := r.take(2)
	if b == nil {
		return 0
	}
	return int(b[0])<<8 | int(b[1])
}

func (r *reader) vec8() []byte  { return r.take(r.u8()) }
func (r *reader) vec16() []byte { return r.take(r.u16()) }

var errMalformed = errors.New("proxy: clienthello: malformed")

func parseHelloBody(msg []byte) (Hello, error) {
	r := &reader{b: msg}
	r.take(2)  // legacy_version
	r.take(32) // random
	r.vec8()   // session id
	r.vec16()  // cipher suites
	r.vec8()   // compression methods
	if r.bad {
		return Hello{}, errMalformed
	}
	var h Hello
	if len(r.b) == 0 {
		return h, nil // no extensions
	}
	exts := &reader{b: r.vec16()}
	if r.bad {
		return Hello{}, errMalformed
	}
	seen := map[int]bool{}
	for len(exts.b) > 0 {
		typ := exts.u16()
		body := exts.vec16()
		if exts.bad {
			return Hello{}, errMalformed
		}
		if seen[typ] {
			return Hello{}, fmt.Errorf("proxy: clienthello: duplicate extension %d", typ)
		}
		seen[typ] = true
		var err error
		switch typ {
		case 0:
			h.ServerName, err = parseSNI(body)
		case 16:
			h.ALPN, err = parseALPN(body)
		}
		if err != nil {
			return Hello{}, err
		}
	}
	return h, nil
}

func parseSNI(body []byte) (string, error) {
	r := &reader{b: body}
	list := &reader{b: r.vec16()}
	if r.bad || len(r.b) != 0 {
		return "", errMalformed
	}
	name := ""
	for len(list.b) > 0 {
		typ := list.u8()
		v := list.vec16()
		if list.bad {
			return "", errMalformed
		}
		if typ != 0 {
			continue
		}
		if name != "" {
			return "", errors.New("proxy: clienthello: more than one host_name")
		}
		if len(v) == 0 || len(v) > 255 {
			return "", errors.New("proxy: clienthello: bad host_name length")
		}
		for _, c := range v {
			if c <= ' ' || c >= 0x7f {
				return "", fmt.Errorf("proxy: clienthello: host_name has byte %#02x", c)
			}
		}
		name = string(v)
	}
	return name, nil
}

func parseALPN(body []byte) ([]string, error) {
	r := &reader{b: body}
	list := &reader{b: r.vec16()}
	if r.bad || len(r.b) != 0 {
		return nil, errMalformed
	}
	var out []string
	for len(list.b) > 0 {
		p := list.vec8()
		if list.bad || len(p) == 0 {
			return nil, errMalformed
		}
		if len(out) < 16 {
			out = append(out, string(p))
		}
	}
	return out, nil
}
