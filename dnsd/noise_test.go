package dnsd

import (
	"encoding/binary"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"airlock/audit"
)

// rawQuery is a query for one name whose first label is labelLen bytes
// long (beyond 63 it is no valid label), with qdcount questions declared.
func rawQuery(id uint16, labelLen int, qdcount uint16) []byte {
	b := make([]byte, 12, 128)
	binary.BigEndian.PutUint16(b[0:], id)
	binary.BigEndian.PutUint16(b[2:], 0x0100) // RD
	binary.BigEndian.PutUint16(b[4:], qdcount)
	if qdcount == 0 {
		return b
	}
	b = append(b, byte(labelLen))
	b = append(b, strings.Repeat("a", labelLen)...)
	b = append(b, 7)
	b = append(b, "example"...)
	b = append(b, 4)
	b = append(b, "test"...)
	return append(b, 0, 0, 1, 0, 1) // root, A, IN
}

// exchangeRaw sends b over netw and returns the answer's header.
func exchangeRaw(t *testing.T, netw, addr string, b []byte) *dns.Msg {
	t.Helper()
	c, err := net.DialTimeout(netw, addr, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	co := &dns.Conn{Conn: c}
	if _, err := co.Write(b); err != nil {
		t.Fatal(err)
	}
	r, err := co.ReadMsg()
	if err != nil {
		t.Fatalf("%s: no answer: %v", netw, err)
	}
	return r
}

func (r *recorder) byRule(rule string) []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Event
	for _, e := range r.evs {
		if e.Rule == rule {
			out = append(out, e)
		}
	}
	return out
}

// A malformed query is answered FORMERR and logged as a denial with its
// rule, over UDP and TCP, with the sandbox that sent it.
func TestMalformedQueryLogged(t *testing.T) {
	w := newWorld(t)
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), nil)
	for i, tc := range []struct {
		name, netw string
		msg        []byte
		reason     string
	}{
		{"long label udp", "udp", rawQuery(0x1001, 72, 1), "malformed query: "},
		{"long label tcp", "tcp", rawQuery(0x1002, 72, 1), "malformed query: "},
		{"no question udp", "udp", rawQuery(0x1003, 3, 0), "question count"},
		{"no question tcp", "tcp", rawQuery(0x1004, 3, 0), "question count"},
	} {
		r := exchangeRaw(t, tc.netw, h.addrFor(tc.netw), tc.msg)
		if r.Rcode != dns.RcodeFormatError || r.Id != binary.BigEndian.Uint16(tc.msg) {
			t.Errorf("%s: got %s id %#x", tc.name, dns.RcodeToString[r.Rcode], r.Id)
		}
		evs := h.rec.byRule(RuleMalformed)
		if len(evs) != i+1 {
			t.Fatalf("%s: %d malformed events, want %d", tc.name, len(evs), i+1)
		}
		e := evs[i]
		if e.Verdict != "deny" || e.Sandbox != "sb1" || !strings.HasPrefix(e.Reason, tc.reason) ||
			e.DNS.RCode != "FORMERR" || e.DNS.Client != "127.0.0.1" || e.DNS.Server == "" {
			t.Errorf("%s: event %+v %+v", tc.name, e, *e.DNS)
		}
	}
	if len(w.queries()) != 0 {
		t.Errorf("upstream saw %v", w.queries())
	}
}

var suppressedRE = regexp.MustCompile(`(\d+) (earlier refused queries from this source|refused queries not logged)`)

// A flood of malformed queries from one source is answered in full but
// logged at a bounded rate; every suppressed event is counted in a later
// event, so logged + counted = sent.
func TestMalformedFloodRateLimited(t *testing.T) {
	w := newWorld(t)
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), nil)
	const sent = 200
	for i := range sent {
		if r := exchangeRaw(t, "udp", h.udp, rawQuery(uint16(i), 72, 1)); r.Rcode != dns.RcodeFormatError {
			t.Fatalf("query %d: %s", i, dns.RcodeToString[r.Rcode])
		}
	}
	logged := len(h.rec.byRule(RuleMalformed))
	if logged < noiseBurst {
		t.Fatalf("%d events for %d malformed queries: want at least the burst (%d)", logged, sent, noiseBurst)
	}
	h.srv.reportSuppressed(time.Now())
	evs := h.rec.byRule(RuleMalformed)
	if len(evs) != logged+1 {
		t.Fatalf("sweep emitted %d summary events, want 1", len(evs)-logged)
	}
	counted := 0
	for _, e := range evs {
		if m := suppressedRE.FindStringSubmatch(e.Reason); m != nil {
			n, _ := strconv.Atoi(m[1])
			counted += n
		}
	}
	if logged+counted != sent {
		t.Errorf("logged %d + counted as suppressed %d != sent %d", logged, counted, sent)
	}
	if sum := evs[len(evs)-1]; sum.Verdict != "deny" || sum.Sandbox != "sb1" || sum.DNS.Client != "127.0.0.1" {
		t.Errorf("summary event %+v", sum)
	}
	// Another source's events are not held back by the flood.
	if r := askFrom(t, "udp", "127.0.0.2", h.udp, "www.example.test", dns.TypeA); r.Rcode != dns.RcodeRefused {
		t.Fatalf("unknown source: %s", dns.RcodeToString[r.Rcode])
	}
	if evs := h.rec.byRule(RuleUnknownSource); len(evs) != 1 || evs[0].DNS.Client != "127.0.0.2" {
		t.Errorf("unknown source events: %+v", evs)
	}
}

// The limiter holds a source to its burst at one instant, reports what it
// held back with the next allowed event, and bounds the sources it tracks.
func TestNoiseLimiterBounds(t *testing.T) {
	var l noiseLimiter
	t0 := time.Unix(1_700_000_000, 0)
	src := loopback
	allowed := 0
	for range 1000 {
		if ok, _ := l.allow(src, t0); ok {
			allowed++
		}
	}
	if allowed != noiseBurst {
		t.Fatalf("allowed %d at one instant, want the burst %d", allowed, noiseBurst)
	}
	ok, n := l.allow(src, t0.Add(time.Second))
	if !ok || n != 1000-noiseBurst {
		t.Fatalf("after a second: allowed %v, reported %d suppressed, want %d", ok, n, 1000-noiseBurst)
	}
	// Many sources: the map stays bounded, the extra ones share a bucket.
	for i := range noiseSources + 100 {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		l.allow(a, t0)
	}
	if len(l.srcs) > noiseSources+1 {
		t.Errorf("tracking %d sources, bound is %d", len(l.srcs), noiseSources+1)
	}
	if got := l.sweep(t0.Add(2 * time.Minute)); len(got) == 0 || len(l.srcs) != 0 {
		t.Errorf("sweep reported %d sources, %d left tracked", len(got), len(l.srcs))
	}
}
