package upstream

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fakeUpstream answers queries on loopback with what answer returns, and
// records the source port and ID of each query.
type fakeUpstream struct {
	pc     net.PacketConn
	forger net.PacketConn // another port, for answers that must be ignored
	mu     sync.Mutex
	ports  []int
	ids    []uint16
}

func startUpstream(t *testing.T, answer func(u *fakeUpstream, q *dns.Msg, from net.Addr)) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{}
	var err error
	if u.pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if u.forger, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.pc.Close(); u.forger.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := u.pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			u.mu.Lock()
			u.ports = append(u.ports, from.(*net.UDPAddr).Port)
			u.ids = append(u.ids, q.Id)
			u.mu.Unlock()
			if answer != nil {
				answer(u, q, from)
			}
		}
	}()
	return u
}

func (u *fakeUpstream) addr() string { return u.pc.LocalAddr().String() }

// answerTo builds q's answer with one A record, changed by edit.
func answerTo(q *dns.Msg, addr string, edit func(*dns.Msg)) []byte {
	m := new(dns.Msg)
	m.SetReply(q)
	rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A " + addr)
	m.Answer = []dns.RR{rr}
	if edit != nil {
		edit(m)
	}
	b, _ := m.Pack()
	return b
}

// forging answers a query first with everything the strict matching must
// read past, then with the real answer (198.18.0.4).
func forging(u *fakeUpstream, q *dns.Msg, from net.Addr) {
	forged := "198.18.0.66"
	u.forger.WriteTo(answerTo(q, forged, nil), from) // right ID and question, wrong port
	for _, edit := range []func(*dns.Msg){
		func(m *dns.Msg) { m.Id++ },
		func(m *dns.Msg) { m.Question[0].Name = "x" + m.Question[0].Name },
		func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAAAA },
		func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS },
		func(m *dns.Msg) { m.Response = false },
		func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) },
		func(m *dns.Msg) { m.Question = nil },
	} {
		u.pc.WriteTo(answerTo(q, forged, edit), from)
	}
	u.pc.WriteTo([]byte("\x00\x00\x80\x00garbage"), from)
	u.pc.WriteTo(answerTo(q, "198.18.0.4", func(m *dns.Msg) { m.Question[0].Name = "WwW.ExAmple.TEST." }), from)
}

func echo(u *fakeUpstream, q *dns.Msg, from net.Addr) {
	u.pc.WriteTo(answerTo(q, "198.18.0.4", nil), from)
}

// handler records what the pool hands back.
type handler struct {
	answered chan Answer[int]
	failed   chan error
}

func newHandler() *handler {
	return &handler{answered: make(chan Answer[int], 64), failed: make(chan error, 64)}
}

func (h *handler) Answered(batch []Answer[int]) {
	for _, a := range batch {
		h.answered <- a
	}
}

func (h *handler) Failed(w int, up string, err error) { h.failed <- err }

func question(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	return m
}

func firstA(t *testing.T, m *dns.Msg) string {
	t.Helper()
	if m == nil || len(m.Answer) != 1 {
		t.Fatalf("answer %v", m)
	}
	return m.Answer[0].(*dns.A).A.String()
}

func newSocks(t *testing.T, h Handler[int], addr string) (*Pool[int], *Socks[int]) {
	t.Helper()
	p := NewPool[int](h)
	t.Cleanup(p.Close)
	s, err := p.Socks(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p, s
}

// exchangeN asks name n times, one query after the other.
func exchangeN(t *testing.T, s *Socks[int], name string, n int) {
	t.Helper()
	for range n {
		if _, err := s.Exchange(context.Background(), question(name), time.Now().Add(2*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

// Exchange reads past forged and mismatched answers (another port, ID,
// name, type or class, a query, several or no questions, garbage) and
// returns the real one; the name's letter case does not matter.
func TestExchangeMatchesStrictly(t *testing.T) {
	u := startUpstream(t, forging)
	_, s := newSocks(t, newHandler(), u.addr())
	for range 3 * MaxUses { // the sockets rotate meanwhile
		r, err := s.Exchange(context.Background(), question("www.example.test."), time.Now().Add(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if got := firstA(t, r); got != "198.18.0.4" {
			t.Fatalf("answer %s, want the real one", got)
		}
	}
}

// Register and a Sender: the Handler gets each query's real answer once,
// and nothing for the forged ones.
func TestRegisterMatchesStrictly(t *testing.T) {
	u := startUpstream(t, forging)
	h := newHandler()
	p, s := newSocks(t, h, u.addr())
	var snd Sender[int]
	const n = 20
	for i := range n {
		b, _ := question("www.example.test.").Pack()
		pend, err := s.Register(i, b, "www.example.test.", dns.TypeA, time.Now().Add(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		snd.Add(pend, b)
	}
	snd.Flush()
	seen := map[int]bool{}
	for range n {
		select {
		case a := <-h.answered:
			if seen[a.W] {
				t.Fatalf("query %d answered twice", a.W)
			}
			seen[a.W] = true
			if got := firstA(t, a.Msg); got != "198.18.0.4" || a.Upstream != u.addr() {
				t.Fatalf("query %d: answer %s from %s", a.W, got, a.Upstream)
			}
		case err := <-h.failed:
			t.Fatalf("a query failed: %v", err)
		case <-time.After(3 * time.Second):
			t.Fatalf("%d of %d answered", len(seen), n)
		}
	}
	time.Sleep(50 * time.Millisecond) // any late extra delivery would show now
	if len(h.answered) != 0 || len(h.failed) != 0 || p.pending.Load() != 0 {
		t.Fatalf("after the answers: %d answered, %d failed, %d pending", len(h.answered), len(h.failed), p.pending.Load())
	}
}

// Source ports: a socket carries at most MaxUses queries, and consecutive
// queries mostly use different ones (one of Slots picked at random).
func TestSourcePortsRotate(t *testing.T) {
	u := startUpstream(t, echo)
	_, s := newSocks(t, newHandler(), u.addr())
	const n = 200
	exchangeN(t, s, "p.example.test.", n)
	u.mu.Lock()
	defer u.mu.Unlock()
	uses, changed := map[int]int{}, 0
	for i, p := range u.ports {
		uses[p]++
		if i > 0 && p != u.ports[i-1] {
			changed++
		}
	}
	for p, k := range uses {
		if k > MaxUses {
			t.Errorf("port %d carried %d queries, more than %d", p, k, MaxUses)
		}
	}
	// Changes with probability (Slots-1)/Slots: 149 of 199 expected; fewer
	// than 110 is more than 6 standard deviations off.
	if len(u.ports) != n || len(uses) < n/MaxUses || changed < 110 {
		t.Errorf("%d queries: %d ports, changed %d times", len(u.ports), len(uses), changed)
	}
}

// IDs are random: barely a repeat in 200, no counting up.
func TestIDsRandom(t *testing.T) {
	u := startUpstream(t, echo)
	_, s := newSocks(t, newHandler(), u.addr())
	exchangeN(t, s, "i.example.test.", 200)
	u.mu.Lock()
	defer u.mu.Unlock()
	distinct, steps := map[uint16]bool{}, 0
	for i, id := range u.ids {
		distinct[id] = true
		if i > 0 && id == u.ids[i-1]+1 {
			steps++
		}
	}
	if len(distinct) < 195 || steps > 3 {
		t.Errorf("200 IDs: %d distinct, %d counted up by one: %v", len(distinct), steps, u.ids)
	}
}

// No two queries pending on a socket share an ID, even when the random
// source repeats itself.
func TestPendingIDsUnique(t *testing.T) {
	seq := []uint16{7, 7, 7, 9, 7, 9, 9, 11, 7, 9, 11, 12}
	i := 0
	newID = func() uint16 { id := seq[i%len(seq)]; i++; return id }
	t.Cleanup(func() { newID = NewID })
	c := &sock[int]{socks: &Socks[int]{pool: NewPool[int](newHandler()), name: "test"}}
	got := map[uint16]bool{}
	for k := range 4 {
		b := make([]byte, 12)
		id, err := c.register(pending[int]{w: k, name: "a.", qtype: dns.TypeA, deadline: never}, b)
		if err != nil {
			t.Fatal(err)
		}
		if got[id] || uint16(b[0])<<8|uint16(b[1]) != id {
			t.Fatalf("query %d: ID %d (repeated, or not written into the query)", k, id)
		}
		got[id] = true
	}
}

// An unanswered query fails at its deadline, both ways of waiting.
func TestDeadline(t *testing.T) {
	u := startUpstream(t, nil) // never answers
	h := newHandler()
	p, s := newSocks(t, h, u.addr())
	start := time.Now()
	_, err := s.Exchange(context.Background(), question("slow.example.test."), start.Add(100*time.Millisecond))
	if !errors.Is(err, ErrTimeout) || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("Exchange: %v after %v, want ErrTimeout after about 100ms", err, time.Since(start))
	}
	b, _ := question("slow.example.test.").Pack()
	pend, err := s.Register(1, b, "slow.example.test.", dns.TypeA, time.Now().Add(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var snd Sender[int]
	snd.Add(pend, b)
	snd.Flush()
	select {
	case err := <-h.failed:
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Failed with %v, want ErrTimeout", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no Failed after the deadline")
	}
	if p.pending.Load() != 0 {
		t.Fatalf("%d still pending", p.pending.Load())
	}
}

// A cancelled Exchange leaves nothing pending, and an answer arriving
// after it reaches no later query.
func TestExchangeCancelled(t *testing.T) {
	var mu sync.Mutex
	var held []func()
	u := startUpstream(t, func(u *fakeUpstream, q *dns.Msg, from net.Addr) {
		if q.Question[0].Name == "late.example.test." {
			mu.Lock()
			held = append(held, func() { u.pc.WriteTo(answerTo(q, "198.18.0.66", nil), from) })
			mu.Unlock()
			return
		}
		echo(u, q, from)
	})
	p, s := newSocks(t, newHandler(), u.addr())
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	if _, err := s.Exchange(ctx, question("late.example.test."), time.Now().Add(2*time.Second)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Exchange: %v, want context.Canceled", err)
	}
	if p.pending.Load() != 0 {
		t.Fatalf("%d pending after the cancel", p.pending.Load())
	}
	mu.Lock()
	for _, f := range held {
		f()
	}
	mu.Unlock()
	for range 2 * MaxUses {
		r, err := s.Exchange(context.Background(), question("www.example.test."), time.Now().Add(2*time.Second))
		if err != nil || firstA(t, r) != "198.18.0.4" || r.Question[0].Name != "www.example.test." {
			t.Fatalf("after a cancelled query: %v, %v", r, err)
		}
	}
}

// Closing the pool fails what is pending with net.ErrClosed.
func TestCloseFailsPending(t *testing.T) {
	u := startUpstream(t, nil)
	h := newHandler()
	p, s := newSocks(t, h, u.addr())
	b, _ := question("c.example.test.").Pack()
	if _, err := s.Register(1, b, "c.example.test.", dns.TypeA, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	p.Close()
	select {
	case err := <-h.failed:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Failed with %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("nothing failed on Close")
	}
	if _, err := s.Register(2, b, "c.example.test.", dns.TypeA, time.Now().Add(time.Minute)); err == nil {
		t.Fatal("Register after Close succeeded")
	}
}

// Check accepts exactly an answer to the query.
func TestCheck(t *testing.T) {
	q := question("www.example.test.")
	q.Id = 4242
	ok := func(edit func(*dns.Msg)) *dns.Msg {
		r := new(dns.Msg)
		r.SetReply(q)
		if edit != nil {
			edit(r)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		r    *dns.Msg
		want bool
	}{
		{"answer", ok(nil), true},
		{"other case", ok(func(m *dns.Msg) { m.Question[0].Name = "WWW.example.TEST." }), true},
		{"nil", nil, false},
		{"other id", ok(func(m *dns.Msg) { m.Id++ }), false},
		{"a query", ok(func(m *dns.Msg) { m.Response = false }), false},
		{"other name", ok(func(m *dns.Msg) { m.Question[0].Name = "www.example.test.x." }), false},
		{"other type", ok(func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeTXT }), false},
		{"other class", ok(func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassANY }), false},
		{"no question", ok(func(m *dns.Msg) { m.Question = nil }), false},
		{"two questions", ok(func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) }), false},
	} {
		if err := Check(q, tc.r); (err == nil) != tc.want {
			t.Errorf("%s: Check = %v, want ok %v", tc.name, err, tc.want)
		}
	}
}

// FuzzMatch: whatever arrives on a socket, nothing panics, and only an
// answer that Check accepts for the pending query is taken.
func FuzzMatch(f *testing.F) {
	q := question("www.example.test.")
	q.Id = 0x1234
	good := answerTo(q, "198.18.0.4", nil)
	f.Add(good)
	f.Add(answerTo(q, "198.18.0.4", func(m *dns.Msg) { m.Id++ }))
	f.Add(answerTo(q, "198.18.0.4", func(m *dns.Msg) { m.Question[0].Name = "other.test." }))
	f.Add([]byte("\x12\x34\x80\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := &sock[int]{socks: &Socks[int]{pool: NewPool[int](newHandler()), name: "test"}}
		hdr := make([]byte, 12)
		newID = func() uint16 { return q.Id }
		defer func() { newID = NewID }()
		if _, err := c.register(pending[int]{w: 1, name: "www.example.test.", qtype: dns.TypeA, deadline: never}, hdr); err != nil {
			t.Fatal(err)
		}
		e, m, ok := c.match(b)
		if !ok {
			if c.n != 1 {
				t.Fatalf("an unmatched datagram removed the pending query")
			}
			return
		}
		if err := Check(q, m); err != nil || e.w != 1 || c.n != 0 {
			t.Fatalf("matched %q: Check %v, w %d, %d left pending", b, err, e.w, c.n)
		}
	})
}
