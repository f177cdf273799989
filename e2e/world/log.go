package world

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Kind is the kind of a Record.
type Kind string

// Record kinds.
const (
	KindDNS    Kind = "dns"    // a DNS query reached the world's DNS
	KindHTTP   Kind = "http"   // an HTTP request reached a site
	KindConn   Kind = "conn"   // a TCP connection or UDP datagram reached a listener
	KindPacket Kind = "packet" // the capture saw a packet (canary hit or foreign source)
)

// Record is one thing that reached the world.
type Record struct {
	Seq    uint64
	Time   time.Time
	Kind   Kind
	Role   Role
	Remote string // source address:port as the server saw it
	Local  string // the address:port it reached

	// http
	Method string
	Host   string
	Path   string
	Query  string
	Header http.Header
	Body   []byte // first bodyLimit bytes
	SNI    string // also set for conn records of TLS listeners

	// dns
	QName string
	QType string
	Proto string // udp | tcp (dns, conn), or the IP protocol (packet)

	// packet
	Src, Dst string
	DPort    uint16
	Foreign  bool // the source is neither the host end nor a world address
}

func (r Record) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s %s", r.Seq, r.Kind, r.Role)
	switch r.Kind {
	case KindDNS:
		fmt.Fprintf(&b, " %s %s %s from %s", r.Proto, r.QType, r.QName, r.Remote)
	case KindHTTP:
		fmt.Fprintf(&b, " %s %s%s", r.Method, r.Host, r.Path)
		if r.Query != "" {
			b.WriteString("?" + r.Query)
		}
		fmt.Fprintf(&b, " from %s", r.Remote)
	case KindConn:
		fmt.Fprintf(&b, " %s %s -> %s", r.Proto, r.Remote, r.Local)
		if r.SNI != "" {
			fmt.Fprintf(&b, " sni=%s", r.SNI)
		}
	case KindPacket:
		fmt.Fprintf(&b, " %s %s -> %s", r.Proto, r.Src, r.Dst)
		if r.DPort != 0 {
			fmt.Fprintf(&b, " port %d", r.DPort)
		}
		if r.Foreign {
			b.WriteString(" FOREIGN-SOURCE")
		}
	}
	return b.String()
}

// Log holds everything that reached the world, in arrival order.
type Log struct {
	mu   sync.Mutex
	recs []Record
	next uint64
	max  int
}

const logMax = 200000

func newLog() *Log { return &Log{max: logMax} }

func (l *Log) add(r Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	r.Seq = l.next
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	if len(l.recs) >= l.max {
		// Keep the newest; never grow without bound.
		l.recs = append(l.recs[:0], l.recs[len(l.recs)/2:]...)
	}
	l.recs = append(l.recs, r)
}

// Mark returns the sequence number of the last record so far; pass it to
// Since to see only what arrived after it.
func (l *Log) Mark() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Since returns the records after mark that match every filter.
func (l *Log) Since(mark uint64, filters ...func(Record) bool) []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Record
	for _, r := range l.recs {
		if r.Seq <= mark || !matchAll(r, filters) {
			continue
		}
		out = append(out, r)
	}
	return out
}

func matchAll(r Record, fs []func(Record) bool) bool {
	for _, f := range fs {
		if !f(r) {
			return false
		}
	}
	return true
}

// ByRole matches records of role.
func ByRole(role Role) func(Record) bool { return func(r Record) bool { return r.Role == role } }

// ByKind matches records of kind.
func ByKind(k Kind) func(Record) bool { return func(r Record) bool { return r.Kind == k } }

// Containing matches records whose name, host, path, query or body holds s
// (case-insensitive): tag each attempt with a unique marker and find it.
func Containing(s string) func(Record) bool {
	s = strings.ToLower(s)
	return func(r Record) bool {
		for _, f := range []string{r.QName, r.Host, r.Path, r.Query, r.SNI, string(r.Body)} {
			if strings.Contains(strings.ToLower(f), s) {
				return true
			}
		}
		return false
	}
}

// Leaks matches what must never happen when traffic comes only through
// the appliance: a packet to the canary, a packet from a foreign source,
// and any record of the evil or canary roles.
func Leaks(r Record) bool {
	return r.Foreign || r.Role == RoleCanary || r.Role == RoleEvil
}

// Log returns the world's record log.
func (w *World) Log() *Log { return w.log }

// Mark is w.Log().Mark().
func (w *World) Mark() uint64 { return w.log.Mark() }

// Since is w.Log().Since.
func (w *World) Since(mark uint64, filters ...func(Record) bool) []Record {
	return w.log.Since(mark, filters...)
}

// Pushes returns the git requests after mark that belong to a push
// (git-receive-pack, in the query or the path).
func (w *World) Pushes(mark uint64) []Record {
	return w.log.Since(mark, ByRole(RoleGit), func(r Record) bool {
		return strings.Contains(r.Path, "receive-pack") || strings.Contains(r.Query, "receive-pack")
	})
}
