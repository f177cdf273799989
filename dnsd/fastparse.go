package dnsd

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// The UDP reader parses the common query itself — one question whose name
// is plain letters, digits, '-' and '_', and at most an OPT record without
// options — into storage the packet keeps, with the name's string taken
// from a per-reader table of names seen before: a repeated query allocates
// nothing. Anything else goes through (*dns.Msg).Unpack. FuzzFastParse
// checks that both agree on every message the fast path accepts.

// nameTableMax bounds a reader's table of names; when full it starts over.
const nameTableMax = 8192

// names maps a query name as written on the wire (presentation form, the
// client's letter case) to its strings.
type names map[string]internedName

type internedName struct {
	name  string // as the client wrote it, fully qualified
	lower string // lower case
}

// reqStore is the storage a fast-parsed request lives in.
type reqStore struct {
	q     [1]dns.Question
	opt   dns.OPT
	extra [1]dns.RR
	text  [256]byte // the name in presentation form, before interning
}

// fastParse fills m from b when b is a plain query; false means "use
// Unpack" (it says nothing about whether b is valid). lower is the name in
// lower case.
func (t names) fastParse(b []byte, m *dns.Msg, st *reqStore) (lower string, ok bool) {
	if len(b) < 12+1+4 {
		return "", false
	}
	flags := binary.BigEndian.Uint16(b[2:])
	if flags&0x8000 != 0 || (flags>>11)&0xF != dns.OpcodeQuery ||
		binary.BigEndian.Uint16(b[4:]) != 1 || binary.BigEndian.Uint16(b[6:]) != 0 || binary.BigEndian.Uint16(b[8:]) != 0 {
		return "", false
	}
	arcount := binary.BigEndian.Uint16(b[10:])
	if arcount > 1 {
		return "", false
	}
	text, off, ok := plainName(b, 12, st.text[:0])
	if !ok || off+4 > len(b) {
		return "", false
	}
	qtype, qclass := binary.BigEndian.Uint16(b[off:]), binary.BigEndian.Uint16(b[off+2:])
	off += 4
	var opt bool
	if arcount == 1 {
		// OPT: root name, type 41, class = UDP size, TTL = flags, no options.
		if off+11 != len(b) || b[off] != 0 || binary.BigEndian.Uint16(b[off+1:]) != dns.TypeOPT || binary.BigEndian.Uint16(b[off+9:]) != 0 {
			return "", false
		}
		st.opt = dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT,
			Class: binary.BigEndian.Uint16(b[off+3:]), Ttl: binary.BigEndian.Uint32(b[off+5:])}}
		opt = true
	} else if off != len(b) {
		return "", false
	}
	in, hit := t[string(text)]
	if !hit {
		if len(t) >= nameTableMax {
			clear(t)
		}
		in.name = string(text)
		in.lower = lowerASCII(in.name)
		t[in.name] = in
	}
	*m = dns.Msg{MsgHdr: dns.MsgHdr{
		Id:                 binary.BigEndian.Uint16(b),
		Opcode:             dns.OpcodeQuery,
		Authoritative:      flags&0x0400 != 0,
		Truncated:          flags&0x0200 != 0,
		RecursionDesired:   flags&0x0100 != 0,
		RecursionAvailable: flags&0x0080 != 0,
		Zero:               flags&0x0040 != 0,
		AuthenticatedData:  flags&0x0020 != 0,
		CheckingDisabled:   flags&0x0010 != 0,
		Rcode:              int(flags & 0xF),
	}}
	st.q[0] = dns.Question{Name: in.name, Qtype: qtype, Qclass: qclass}
	m.Question = st.q[:]
	if opt {
		st.extra[0] = &st.opt
		m.Extra = st.extra[:]
		m.Rcode |= st.opt.ExtendedRcode()
	}
	return in.lower, true
}

// plainName appends the name at off in presentation form ("a.b.") to out
// when every label is made of letters, digits, '-' and '_' and the name is
// not compressed; it returns the offset after the name.
func plainName(b []byte, off int, out []byte) ([]byte, int, bool) {
	for {
		if off >= len(b) {
			return nil, 0, false
		}
		n := int(b[off])
		off++
		if n == 0 {
			break
		}
		if n > 63 || off+n > len(b) || len(out)+n+1 > 254 {
			return nil, 0, false
		}
		for _, c := range b[off : off+n] {
			if !plainByte(c) {
				return nil, 0, false
			}
		}
		out = append(out, b[off:off+n]...)
		out = append(out, '.')
		off += n
	}
	if len(out) == 0 {
		out = append(out, '.')
	}
	return out, off, true
}

func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// lowerASCII lower-cases s, returning s itself when it has no upper case.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; c >= 'A' && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
