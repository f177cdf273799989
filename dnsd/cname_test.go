package dnsd

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"airlock/audit"
)

// chainAnswer makes the world answer name/A with the given records (a
// CNAME chain and its addresses), as a recursive resolver does.
func chainAnswer(w *world, key string, rrs ...string) {
	var answer []dns.RR
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		answer = append(answer, rr)
	}
	w.set(func(w *world) { w.zone[key] = answer })
}

// TestCNAMEChainVerdicts: every CNAME hop of an answer is in the dns
// event with the policy's verdict and rule for that name, fresh and from
// the cache; the answer itself is the asked name's.
func TestCNAMEChainVerdicts(t *testing.T) {
	w := newWorld(t)
	chainAnswer(w, "www.example.test./A",
		"www.example.test. 60 IN CNAME edge.cdn.example.test.",
		"edge.cdn.example.test. 60 IN CNAME Tracker.Example.test.",
		"tracker.example.test. 60 IN CNAME x.other.test.",
		"x.other.test. 60 IN A 1.2.3.4")
	p := webPolicy(t, "", "[deny]\nhosts = [\"tracker.example.test\"]\n")
	h := startServer(t, w, oneSandbox(p, false), nil)
	want := []audit.DNSHop{
		{Name: "edge.cdn.example.test.", Verdict: "allow", Rule: "categories.web.hosts[1] (test.toml:6:26)"},
		{Name: "tracker.example.test.", Verdict: "deny", Rule: "deny.hosts[0] (test.toml:8:10)"},
		{Name: "x.other.test.", Verdict: "deny", Rule: "default (test.toml)"},
	}
	for _, pass := range []string{"fresh", "cached"} {
		r := h.ask(t, "udp", "www.example.test", dns.TypeA)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 4 {
			t.Fatalf("%s: %s %v", pass, dns.RcodeToString[r.Rcode], answers(r))
		}
		evs := h.rec.find("www.example.test")
		e := evs[len(evs)-1]
		if pass == "cached" && !e.DNS.CacheHit {
			t.Errorf("second query was not a cache hit")
		}
		if e.Verdict != "allow" || e.Rule != "categories.web.hosts[1] (test.toml:6:26)" {
			t.Errorf("%s: the answer's verdict %s %s, want the asked name's", pass, e.Verdict, e.Rule)
		}
		if diff := cmp.Diff(want, e.DNS.Chain); diff != "" {
			t.Errorf("%s: chain (-want +got):\n%s", pass, diff)
		}
	}
	if evs := h.rec.find("x.other.test"); len(evs) != 0 {
		t.Errorf("a hop got an event of its own: %+v", evs)
	}
}
