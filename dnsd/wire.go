package dnsd

import (
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Cached answers are kept packed: a hit copies the bytes, patches the ID,
// the question's letter case and the TTLs, and writes them, without
// unpacking or packing a message.

var errBadWire = errors.New("malformed message")

// ttlOffsets returns the offsets of the TTL fields of every record except
// OPT in a packed message.
func ttlOffsets(b []byte) ([]uint16, error) {
	if len(b) < 12 {
		return nil, errBadWire
	}
	qd := int(binary.BigEndian.Uint16(b[4:]))
	rrs := int(binary.BigEndian.Uint16(b[6:])) + int(binary.BigEndian.Uint16(b[8:])) + int(binary.BigEndian.Uint16(b[10:]))
	off := 12
	var err error
	for range qd {
		if off, err = skipName(b, off); err != nil {
			return nil, err
		}
		off += 4
	}
	out := make([]uint16, 0, rrs)
	for range rrs {
		if off, err = skipName(b, off); err != nil {
			return nil, err
		}
		if off+10 > len(b) {
			return nil, errBadWire
		}
		if binary.BigEndian.Uint16(b[off:]) != dns.TypeOPT {
			out = append(out, uint16(off+4))
		}
		off += 10 + int(binary.BigEndian.Uint16(b[off+8:]))
	}
	if off > len(b) {
		return nil, errBadWire
	}
	return out, nil
}

// skipName returns the offset just past the name at off.
func skipName(b []byte, off int) (int, error) {
	for {
		if off >= len(b) {
			return 0, errBadWire
		}
		c := int(b[off])
		switch {
		case c == 0:
			return off + 1, nil
		case c&0xC0 == 0xC0:
			return off + 2, nil
		case c&0xC0 != 0:
			return 0, errBadWire
		}
		off += c + 1
	}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1232); return &b }}

// hitWire renders a cached entry for req into a pooled buffer, or returns
// nil when the fast path does not apply (the caller then uses the message).
func hitWire(e *entry, req *dns.Msg, now time.Time, ttlCap uint32, udpLimit int) *[]byte {
	if e.wire == nil || (udpLimit > 0 && len(e.wire) > udpLimit) {
		return nil
	}
	qn := req.Question[0].Name
	if 12+len(qn)+1 > len(e.wire) || (len(qn) > 1 && len(qn)+1 != e.qnameLen) {
		return nil
	}
	bp := bufPool.Get().(*[]byte)
	b := append((*bp)[:0], e.wire...)
	binary.BigEndian.PutUint16(b, req.Id)
	if req.RecursionDesired {
		b[2] |= 0x01
	} else {
		b[2] &^= 0x01
	}
	if !patchQName(b[12:], qn) {
		*bp = b
		bufPool.Put(bp)
		return nil
	}
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, o := range e.ttls {
		t := binary.BigEndian.Uint32(b[o:])
		t = max(t, age) - age
		binary.BigEndian.PutUint32(b[o:], min(t, ttlCap))
	}
	*bp = b
	return bp
}

// patchQName writes the client's spelling of the name over the cached
// (lower-case) question, label by label; false if they do not line up.
func patchQName(b []byte, name string) bool {
	off, i := 0, 0
	for off < len(b) {
		n := int(b[off])
		if n == 0 {
			return i >= len(name)-1
		}
		if n&0xC0 != 0 || off+1+n > len(b) || i+n > len(name) {
			return false
		}
		for j := 0; j < n; j++ {
			c := name[i+j]
			if c == '\\' || (c|0x20) != (b[off+1+j]|0x20) {
				return false
			}
			b[off+1+j] = c
		}
		i += n + 1
		off += n + 1
	}
	return false
}
