package dnsd

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// queries_per_second: a sandbox over its cap is denied with the guard's
// reason in the event; the upstream never sees the denied queries, and
// another sandbox under the same policy keeps resolving.
func TestQueriesPerSecondGuard(t *testing.T) {
	w := newWorld(t)
	w.add("ok.example.test. 60 IN A 1.2.3.4")
	p := webPolicy(t, "queries_per_second = 2\n", "")
	sb2 := netip.MustParseAddr("127.0.0.2")
	h := startServer(t, w, idents{loopback: {ID: "sb1", Policy: p}, sb2: {ID: "sb2", Policy: p}}, func(c *Config) { c.CacheSize = -1 })
	const n = 8
	var rcodes []int
	for range n {
		rcodes = append(rcodes, h.ask(t, "udp", "ok.example.test", dns.TypeA).Rcode)
	}
	// The bucket starts full (2); 8 queries back to back take far less than
	// the 3 s the bucket would need to refill for all of them.
	if rcodes[0] != dns.RcodeSuccess || rcodes[1] != dns.RcodeSuccess {
		t.Fatalf("first two queries (the burst) not answered: %v", rcodes)
	}
	evs := h.rec.find("ok.example.test")
	denied := 0
	for i, rc := range rcodes {
		e := evs[i]
		if rc == dns.RcodeSuccess {
			if e.Verdict != "allow" || e.DNS.Guard != "" {
				t.Errorf("query %d answered but event verdict %q guard %q", i, e.Verdict, e.DNS.Guard)
			}
			continue
		}
		denied++
		if rc != dns.RcodeNameError || e.Verdict != "deny" || e.Rule != "dns."+GuardRateSecond || e.DNS.Guard != GuardRateSecond ||
			e.Reason != "exfiltration guard: queries_per_second" {
			t.Errorf("query %d: %s verdict %q rule %q guard %q reason %q", i, dns.RcodeToString[rc], e.Verdict, e.Rule, e.DNS.Guard, e.Reason)
		}
	}
	if denied == 0 {
		t.Fatalf("no query denied over queries_per_second = 2: %v", rcodes)
	}
	if got := len(w.queries()); got != n-denied {
		t.Errorf("upstream saw %d queries, want the %d answered ones", got, n-denied)
	}
	if r := askFrom(t, "udp", "127.0.0.2", h.udp, "ok.example.test", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Errorf("other sandbox got %s", dns.RcodeToString[r.Rcode])
	}
	if e := h.rec.find("ok.example.test"); e[len(e)-1].Sandbox != "sb2" || e[len(e)-1].DNS.Guard != "" {
		t.Errorf("other sandbox's event: %+v", e[len(e)-1])
	}
}

// The caps, on a fixed clock: queries_per_second refills each second and
// is checked before queries_per_minute; names_per_parent only sees queries
// the rate caps let through.
func TestRateCapsClock(t *testing.T) {
	var b boxGuard
	t0 := time.Unix(1_000_000, 0)
	lim := limits{qps: 2, qpm: 5}
	want := []string{"", "", GuardRateSecond, GuardRateSecond}
	for i, w := range want {
		if g, _ := b.check("a.example.test.", lim, t0); g != w {
			t.Fatalf("query %d at t0: guard %q, want %q", i, g, w)
		}
	}
	t1 := t0.Add(time.Second)
	for i, w := range []string{"", "", GuardRateSecond} {
		if g, _ := b.check("a.example.test.", lim, t1); g != w {
			t.Fatalf("query %d at t0+1s: guard %q, want %q", i, g, w)
		}
	}
	// Four allowed so far out of queries_per_minute = 5.
	t2 := t0.Add(2 * time.Second)
	for i, w := range []string{"", GuardRate} {
		if g, _ := b.check("a.example.test.", lim, t2); g != w {
			t.Fatalf("query %d at t0+2s: guard %q, want %q", i, g, w)
		}
	}
	var other boxGuard
	if g, _ := other.check("a.example.test.", lim, t2); g != "" {
		t.Errorf("a fresh sandbox is limited: %q", g)
	}
}

// The policy decides which query types are answered: ANY and NULL are
// refused under the default qtypes and never reach the upstream, and
// forwarded for a policy that lists them.
func TestQTypesFromPolicy(t *testing.T) {
	w := newWorld(t)
	w.add("ok.example.test. 60 IN A 1.2.3.4")
	def := webPolicy(t, "", "")
	anyOK := webPolicy(t, `qtypes = ["A", "ANY", "NULL"]`+"\n", "")
	sb2 := netip.MustParseAddr("127.0.0.2")
	h := startServer(t, w, idents{loopback: {ID: "sb1", Policy: def}, sb2: {ID: "sb2", Policy: anyOK}}, nil)
	for _, qt := range []uint16{dns.TypeANY, dns.TypeNULL} {
		r := h.ask(t, "udp", "ok.example.test", qt)
		evs := h.rec.find("ok.example.test")
		e := evs[len(evs)-1]
		if r.Rcode != dns.RcodeRefused || e.Verdict != "deny" || !strings.HasPrefix(e.Rule, "dns.qtypes ") || !strings.Contains(e.Reason, "dns.qtypes") {
			t.Errorf("default policy %s: %s verdict %q rule %q reason %q", dns.Type(qt), dns.RcodeToString[r.Rcode], e.Verdict, e.Rule, e.Reason)
		}
	}
	if q := w.queries(); len(q) != 0 {
		t.Fatalf("refused types reached the upstream: %v", q)
	}
	for _, qt := range []uint16{dns.TypeANY, dns.TypeNULL} {
		r := askFrom(t, "udp", "127.0.0.2", h.udp, "ok.example.test", qt)
		if r.Rcode != dns.RcodeSuccess {
			t.Errorf("policy listing %s: %s", dns.Type(qt), dns.RcodeToString[r.Rcode])
		}
		if !w.saw("ok.example.test") {
			t.Errorf("%s allowed by the policy was not forwarded", dns.Type(qt))
		}
	}
	if r := askFrom(t, "udp", "127.0.0.2", h.udp, "ok.example.test", dns.TypeAAAA); r.Rcode != dns.RcodeRefused {
		t.Errorf("AAAA, not in the policy's qtypes: %s", dns.RcodeToString[r.Rcode])
	}
}

// Upstream queries leave from source ports that change from query to
// query, not from a fixed few: 128 forwarded names, one after the other,
// use at least 8 distinct ports (a socket is replaced after 16 queries),
// and most consecutive queries (each port is one of a few picked at
// random) use different ones.
func TestUpstreamSourcePortsVary(t *testing.T) {
	w := newWorld(t)
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), nil)
	for i := range 128 {
		h.ask(t, "udp", fmt.Sprintf("p%d.example.test", i), dns.TypeA)
	}
	w.mu.Lock()
	ports := append([]int(nil), w.ports...)
	w.mu.Unlock()
	distinct, changed := map[int]bool{}, 0
	for i, p := range ports {
		distinct[p] = true
		if i > 0 && p != ports[i-1] {
			changed++
		}
	}
	// Picked at random among 4, the port changes with probability 3/4:
	// 95 of 127 expected; fewer than 64 is 6 standard deviations off.
	if len(ports) != 128 || len(distinct) < 8 || changed < 64 {
		t.Errorf("128 upstream queries: %d distinct source ports, changed %d times: %v", len(distinct), changed, ports)
	}
}

// Sweep yields the lock every sweepChunk bindings; with queries adding
// bindings meanwhile it still removes every expired one and keeps the
// count right.
func TestBindingsSweepInChunks(t *testing.T) {
	b := NewBindings(100000, 0)
	now := time.Now()
	a1, a2 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	for i := range 5000 {
		exp := now.Add(-time.Second) // expired
		if i%2 == 0 {
			exp = now.Add(time.Hour)
		}
		b.Add("sb", fmt.Sprintf("n%d.example.test", i), a1, exp)
		b.Add("sb", fmt.Sprintf("k%d.example.test", i), netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), exp)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			b.Add("sb", fmt.Sprintf("late%d.example.test", i), a2, now.Add(time.Hour))
		}
	}()
	b.Sweep(now)
	<-done
	all := b.All()
	if len(all) != 5000+2000 || b.Len() != len(all) {
		t.Fatalf("after sweep: %d live bindings, Len %d; want %d", len(all), b.Len(), 7000)
	}
	for _, x := range all {
		if !x.Expires.After(now) {
			t.Fatalf("expired binding kept: %+v", x)
		}
	}
}
