package dnsd

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"airlock/policies"
)

func oneSandbox(p Policy, v6 bool) idents {
	return idents{loopback: {ID: "sb1", Policy: p, IPv6: v6}}
}

func TestAllowedNameAnswered(t *testing.T) {
	w := newWorld(t)
	w.add("www.example.test. 60 IN A 1.2.3.4")
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), nil)
	for _, netw := range []string{"udp", "tcp"} {
		r := h.ask(t, netw, "WWW.Example.test", dns.TypeA)
		if r.Rcode != dns.RcodeSuccess {
			t.Fatalf("%s: rcode %s", netw, dns.RcodeToString[r.Rcode])
		}
		if diff := cmp.Diff([]string{"1.2.3.4"}, answers(r)); diff != "" {
			t.Errorf("%s: answers (-want +got):\n%s", netw, diff)
		}
		if r.Question[0].Name != "WWW.Example.test." {
			t.Errorf("%s: question not echoed as asked: %q", netw, r.Question[0].Name)
		}
	}
	evs := h.rec.find("www.example.test")
	if len(evs) != 2 {
		t.Fatalf("want 2 events, got %d", len(evs))
	}
	e := evs[0]
	if e.Verdict != "allow" || e.Category != "web" || !strings.HasPrefix(e.Rule, "categories.web.hosts") || e.Sandbox != "sb1" ||
		e.DNS.RCode != "NOERROR" || e.DNS.Upstream != w.addr || e.DNS.CacheHit {
		t.Errorf("first event: %+v %+v", e, *e.DNS)
	}
	if !evs[1].DNS.CacheHit {
		t.Errorf("second query was not a cache hit: %+v", *evs[1].DNS)
	}
	if got := len(w.queries()); got != 1 {
		t.Errorf("upstream saw %d queries, want 1 (second from cache)", got)
	}
}

func TestDeniedNameBlockedNeverForwarded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block string
		rcode int
	}{
		{"nxdomain", "", dns.RcodeNameError},
		{"refused", `block = "refused"` + "\n", dns.RcodeRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.add("secret.evil.test. 60 IN A 1.2.3.4")
			p := webPolicy(t, tc.block, "")
			h := startServer(t, w, oneSandbox(p, false), nil)
			for _, netw := range []string{"udp", "tcp"} {
				r := h.ask(t, netw, "secret.evil.test", dns.TypeA)
				if r.Rcode != tc.rcode || len(r.Answer) != 0 {
					t.Fatalf("%s: got %s with %d answers", netw, dns.RcodeToString[r.Rcode], len(r.Answer))
				}
				e := ede(r)
				if e == nil || e.InfoCode != dns.ExtendedErrorCodeBlocked {
					t.Fatalf("%s: want EDE Blocked, got %v", netw, e)
				}
			}
			if w.saw("secret.evil.test") {
				t.Fatalf("upstream saw the denied name: %v", w.queries())
			}
			evs := h.rec.find("secret.evil.test")
			if len(evs) != 2 || evs[0].Verdict != "deny" || !strings.HasPrefix(evs[0].Rule, "default") || evs[0].DNS.Upstream != "" {
				t.Fatalf("events: %+v", evs)
			}
		})
	}
}

func TestRebindingStripped(t *testing.T) {
	w := newWorld(t)
	w.add("rebind.example.test. 60 IN A 127.0.0.1",
		"rebind.example.test. 60 IN A 10.0.0.1",
		"rebind.example.test. 60 IN A 169.254.169.254",
		"rebind.example.test. 60 IN A 1.2.3.4",
		"rebind.example.test. 60 IN AAAA ::ffff:127.0.0.1",
		"rebind.example.test. 60 IN AAAA ::1",
		"rebind.example.test. 60 IN AAAA 2001:4860::1",
		"svc.internal.test. 60 IN A 198.18.7.7",
		"svc.internal.test. 60 IN A 10.9.9.9",
	)
	p := webPolicy(t, "", `
[categories.internal]
kind = "internal_api"
hosts = ["*.internal.test"]
cidrs = ["198.18.0.0/15"]
routes = [{ methods = ["GET"], path = "/v1/*" }]
`)
	h := startServer(t, w, oneSandbox(p, true), nil)

	for _, tc := range []struct {
		name     string
		qtype    uint16
		want     []string
		stripped []string
	}{
		{"rebind.example.test", dns.TypeA, []string{"1.2.3.4"}, []string{"127.0.0.1", "10.0.0.1", "169.254.169.254"}},
		{"rebind.example.test", dns.TypeAAAA, []string{"2001:4860::1"}, []string{"127.0.0.1", "::1"}},
		{"svc.internal.test", dns.TypeA, []string{"198.18.7.7"}, []string{"10.9.9.9"}},
	} {
		r := h.ask(t, "udp", tc.name, tc.qtype)
		if diff := cmp.Diff(tc.want, answers(r)); diff != "" {
			t.Errorf("%s %s answers (-want +got):\n%s", tc.name, dns.Type(tc.qtype), diff)
		}
		// Ask again: the cached answer is the filtered one.
		r = h.ask(t, "udp", tc.name, tc.qtype)
		if diff := cmp.Diff(tc.want, answers(r)); diff != "" {
			t.Errorf("%s %s cached answers (-want +got):\n%s", tc.name, dns.Type(tc.qtype), diff)
		}
	}
	evs := h.rec.find("rebind.example.test")
	if diff := cmp.Diff([]string{"127.0.0.1", "10.0.0.1", "169.254.169.254"}, evs[0].DNS.Stripped); diff != "" {
		t.Errorf("event stripped (-want +got):\n%s", diff)
	}
	// The rebinding guard is named with the classes it stripped; the
	// verdict stays that of the name, fresh and from the cache.
	for i, e := range evs {
		if e.Verdict != "allow" || !strings.HasPrefix(e.Rule, "categories.web.hosts") || e.DNS.Guard != GuardRebinding {
			t.Errorf("event %d: verdict %q rule %q guard %q", i, e.Verdict, e.Rule, e.DNS.Guard)
		}
	}
	wantReason := map[string]string{
		"A":    "stripped 127.0.0.1 (loopback), 10.0.0.1 (private), 169.254.169.254 (link-local)",
		"AAAA": "stripped 127.0.0.1 (loopback), ::1 (loopback)",
	}
	for _, e := range evs {
		if !strings.HasSuffix(e.Reason, wantReason[e.DNS.QType]) {
			t.Errorf("%s event reason %q, want it to end with %q", e.DNS.QType, e.Reason, wantReason[e.DNS.QType])
		}
	}
	if evs := h.rec.find("svc.internal.test"); evs[0].DNS.Guard != GuardRebinding || !strings.HasSuffix(evs[0].Reason, "stripped 10.9.9.9 (private)") ||
		evs[0].Verdict != "allow" || evs[0].Category != "internal" {
		t.Errorf("internal event: verdict %q category %q guard %q reason %q", evs[0].Verdict, evs[0].Category, evs[0].DNS.Guard, evs[0].Reason)
	}
}

func TestAAAAEmptyWithoutIPv6(t *testing.T) {
	w := newWorld(t)
	w.add("v6.example.test. 60 IN AAAA 2001:4860::1")
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), nil)
	r := h.ask(t, "udp", "v6.example.test", dns.TypeAAAA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("want empty NOERROR, got %s %v", dns.RcodeToString[r.Rcode], answers(r))
	}
	// The withheld addresses are in the event with the guard that withheld
	// them, fresh and from the cache alike; the verdict stays the name's.
	r = h.ask(t, "udp", "v6.example.test", dns.TypeAAAA)
	if len(r.Answer) != 0 {
		t.Fatalf("cached answer not empty: %v", answers(r))
	}
	evs := h.rec.find("v6.example.test")
	if len(evs) != 2 {
		t.Fatalf("want 2 events, got %d", len(evs))
	}
	for i, e := range evs {
		if diff := cmp.Diff([]string{"2001:4860::1"}, e.DNS.Stripped); diff != "" {
			t.Errorf("event %d stripped (-want +got):\n%s", i, diff)
		}
		if e.Verdict != "allow" || !strings.HasPrefix(e.Rule, "categories.web.hosts") || e.DNS.Guard != "no-ipv6" ||
			!strings.Contains(e.Reason, "withheld 2001:4860::1 (no-ipv6)") {
			t.Errorf("event %d: verdict %q rule %q guard %q reason %q", i, e.Verdict, e.Rule, e.DNS.Guard, e.Reason)
		}
	}
	if !evs[1].DNS.CacheHit {
		t.Errorf("second query was not a cache hit")
	}
}

func TestExfiltrationGuards(t *testing.T) {
	w := newWorld(t)
	w.add("ok.example.test. 60 IN A 1.2.3.4", "ok.example.test. 60 IN TXT \"hello\"")
	keys := "max_label = 40\nmax_name = 120\nnames_per_parent = 5\n"
	p, other := webPolicy(t, keys, ""), webPolicy(t, keys, "")
	sb2 := netip.MustParseAddr("127.0.0.2")
	h := startServer(t, w, idents{loopback: {ID: "sb1", Policy: p}, sb2: {ID: "sb2", Policy: other}}, nil)

	check := func(name string, qtype uint16, rcode int, guard, rule string) {
		t.Helper()
		r := h.ask(t, "udp", name, qtype)
		if r.Rcode != rcode {
			t.Fatalf("%s: rcode %s, want %s", name, dns.RcodeToString[r.Rcode], dns.RcodeToString[rcode])
		}
		evs := h.rec.find(name)
		e := evs[len(evs)-1]
		if e.DNS.Guard != guard || !strings.HasPrefix(e.Rule, rule) {
			t.Fatalf("%s: event guard %q rule %q, want %q %q", name, e.DNS.Guard, e.Rule, guard, rule)
		}
	}
	long := fmt.Sprintf("%041d.example.test", 7)
	check(long, dns.TypeA, dns.RcodeNameError, GuardLabelLength, "dns.max_label")
	longName := "a23456789.b23456789.c23456789.d23456789.e23456789.f23456789.g23456789.h23456789.i23456789.j23456789.k23456789.example.test"
	check(longName, dns.TypeA, dns.RcodeNameError, GuardNameLength, "dns.max_name")
	check("ok.example.test", dns.TypeTXT, dns.RcodeRefused, "", "dns.qtypes")

	// Many random subdomains of one parent: the sixth distinct name trips.
	for i := range 5 {
		check(fmt.Sprintf("x%d.chunk.example.test", i), dns.TypeA, dns.RcodeSuccess, "", "categories.web.hosts")
	}
	check("x5.chunk.example.test", dns.TypeA, dns.RcodeNameError, GuardParent, "dns.names_per_parent")
	if w.saw("x5.chunk.example.test") || w.saw(long) || w.saw(longName) {
		t.Errorf("a guarded name reached the upstream: %v", w.queries())
	}
	// A name already seen this window still resolves.
	check("x1.chunk.example.test", dns.TypeA, dns.RcodeSuccess, "", "categories.web.hosts")

	// The other sandbox is unaffected.
	r := askFrom(t, "udp", "127.0.0.2", h.udp, "x5.chunk.example.test", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess {
		t.Fatalf("other sandbox got %s", dns.RcodeToString[r.Rcode])
	}
}

// names_per_parent counts under the parent an exfiltration stream varies:
// the stream is denied there with the guard's reason, a sibling name under
// the same registrable domain still resolves, and another sandbox is
// unaffected.
func TestNamesPerParentScope(t *testing.T) {
	w := newWorld(t)
	w.add("registry.example.test. 60 IN A 1.2.3.4", "api.other.example.test. 60 IN A 1.2.3.5")
	keys := "names_per_parent = 5\n"
	sb2 := netip.MustParseAddr("127.0.0.2")
	h := startServer(t, w, idents{loopback: {ID: "sb1", Policy: webPolicy(t, keys, "")}, sb2: {ID: "sb2", Policy: webPolicy(t, keys, "")}}, nil)

	// One random label under pkg.example.test; two random labels (each
	// query a new immediate parent) under deep.example.test.
	streams := map[string]func(i int) string{
		"pkg.example.test":  func(i int) string { return fmt.Sprintf("c%02d.pkg.example.test", i) },
		"deep.example.test": func(i int) string { return fmt.Sprintf("d%02d.e%02d.deep.example.test", i, i) },
	}
	for parent, name := range streams {
		for i := range 10 {
			n := name(i)
			r := h.ask(t, "udp", n, dns.TypeA)
			evs := h.rec.find(n)
			e := evs[len(evs)-1]
			if i < 5 {
				if r.Rcode != dns.RcodeSuccess || e.DNS.Guard != "" {
					t.Fatalf("%s: %s guard %q before the limit", n, dns.RcodeToString[r.Rcode], e.DNS.Guard)
				}
				continue
			}
			if r.Rcode != dns.RcodeNameError || e.Verdict != "deny" || e.Rule != "dns."+GuardParent || e.DNS.Guard != GuardParent ||
				!strings.Contains(e.Reason, "exfiltration guard: names_per_parent") || !strings.Contains(e.Reason, "under "+parent+" ") {
				t.Fatalf("%s: %s verdict %q rule %q guard %q reason %q", n, dns.RcodeToString[r.Rcode], e.Verdict, e.Rule, e.DNS.Guard, e.Reason)
			}
			if w.saw(n) {
				t.Fatalf("upstream saw the guarded name %s", n)
			}
		}
	}
	// Siblings under the same registrable domain were never part of the
	// streams: they resolve, for the sandbox that streamed too.
	for _, n := range []string{"registry.example.test", "api.other.example.test"} {
		r := h.ask(t, "udp", n, dns.TypeA)
		evs := h.rec.find(n)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || evs[len(evs)-1].DNS.Guard != "" {
			t.Errorf("sibling %s: %s %v guard %q", n, dns.RcodeToString[r.Rcode], answers(r), evs[len(evs)-1].DNS.Guard)
		}
	}
	// The other sandbox may still ask under the abused parent.
	if r := askFrom(t, "udp", "127.0.0.2", h.udp, "c09.pkg.example.test", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Errorf("other sandbox got %s", dns.RcodeToString[r.Rcode])
	}
}

func TestParentLevels(t *testing.T) {
	for name, want := range map[string][]level{
		"a.b.pkg.example.test":  {{"b.pkg.example.test", "a"}, {"pkg.example.test", "b"}, {"example.test", "pkg"}},
		"registry.example.test": {{"example.test", "registry"}},
		"example.test":          nil,
		"test":                  nil,
		"a.b.shop.co.uk":        {{"b.shop.co.uk", "a"}, {"shop.co.uk", "b"}}, // co.uk's children are unrelated owners
	} {
		if diff := cmp.Diff(want, parentLevels(name, nil), cmp.AllowUnexported(level{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

func TestQueryRateGuard(t *testing.T) {
	w := newWorld(t)
	w.add("ok.example.test. 60 IN A 1.2.3.4")
	p := webPolicy(t, "queries_per_minute = 3\n", "")
	sb2 := netip.MustParseAddr("127.0.0.2")
	h := startServer(t, w, idents{loopback: {ID: "sb1", Policy: p}, sb2: {ID: "sb2", Policy: p}}, nil)
	var rcodes []int
	for range 5 {
		rcodes = append(rcodes, h.ask(t, "udp", "ok.example.test", dns.TypeA).Rcode)
	}
	if diff := cmp.Diff([]int{0, 0, 0, dns.RcodeNameError, dns.RcodeNameError}, rcodes); diff != "" {
		t.Fatalf("rcodes (-want +got):\n%s", diff)
	}
	evs := h.rec.find("ok.example.test")
	if evs[4].DNS.Guard != GuardRate {
		t.Errorf("guard %q, want %q", evs[4].DNS.Guard, GuardRate)
	}
	if r := askFrom(t, "udp", "127.0.0.2", h.udp, "ok.example.test", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Errorf("other sandbox got %s", dns.RcodeToString[r.Rcode])
	}
}

func TestTXTAllowedByCategory(t *testing.T) {
	w := newWorld(t)
	w.add("ok.example.test. 60 IN TXT \"v=1\"")
	p := webPolicy(t, "", `dns_types = ["TXT"]`+"\n")
	h := startServer(t, w, oneSandbox(p, false), nil)
	if r := h.ask(t, "udp", "ok.example.test", dns.TypeTXT); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("TXT: %s %v", dns.RcodeToString[r.Rcode], answers(r))
	}
	if r := h.ask(t, "udp", "ok.example.test", dns.TypeANY); r.Rcode != dns.RcodeRefused {
		t.Fatalf("ANY: %s", dns.RcodeToString[r.Rcode])
	}
}

func TestSandboxesWithDifferentPolicies(t *testing.T) {
	w1, w2 := newWorld(t), newWorld(t)
	w1.add("svc.shared.test. 60 IN A 198.18.9.9", "svc.shared.test. 60 IN A 1.2.3.4")
	w2.add("svc.shared.test. 60 IN A 5.6.7.8")
	shared := func(dnsKeys, extra string) *policies.Policy {
		return mustPolicy(t, "version = 1\n[dns]\n"+dnsKeys+"[categories.shared]\nkind = \"public_web\"\nhosts = [\"*.shared.test\"]\n"+extra)
	}
	internalPol := shared("", `cidrs = ["198.18.9.0/24"]`+"\n")
	plain := shared("", "")
	ownUpstream := shared(fmt.Sprintf("upstreams = [%q]\n", w2.addr), "")
	denies := mustPolicy(t, "version = 1\n[categories.other]\nkind = \"public_web\"\nhosts = [\"other.test\"]\n")
	ids := idents{
		loopback:                         {ID: "internal", Policy: internalPol},
		netip.MustParseAddr("127.0.0.2"): {ID: "plain", Policy: plain},
		netip.MustParseAddr("127.0.0.3"): {ID: "own", Policy: ownUpstream},
		netip.MustParseAddr("127.0.0.4"): {ID: "denies", Policy: denies},
	}
	h := startServer(t, w1, ids, nil)
	for _, tc := range []struct {
		src   string
		rcode int
		want  []string
	}{
		{"127.0.0.1", dns.RcodeSuccess, []string{"198.18.9.9", "1.2.3.4"}},
		{"127.0.0.2", dns.RcodeSuccess, []string{"1.2.3.4"}},
		{"127.0.0.3", dns.RcodeSuccess, []string{"5.6.7.8"}},
		{"127.0.0.4", dns.RcodeNameError, nil},
		{"127.0.0.1", dns.RcodeSuccess, []string{"198.18.9.9", "1.2.3.4"}},
	} {
		r := askFrom(t, "udp", tc.src, h.udp, "svc.shared.test", dns.TypeA)
		if r.Rcode != tc.rcode {
			t.Errorf("%s: rcode %s", tc.src, dns.RcodeToString[r.Rcode])
		}
		if diff := cmp.Diff(tc.want, answers(r)); diff != "" {
			t.Errorf("%s answers (-want +got):\n%s", tc.src, diff)
		}
	}
}

func TestECHStripped(t *testing.T) {
	w := newWorld(t)
	w.add(`web.example.test. 60 IN HTTPS 1 . alpn="h2,h3" ech="AEX+DQBBpQAgACB/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAEAAQAAEAAQABAAMAAwAEAAAAAA==" ipv4hint="1.2.3.4,10.0.0.1"`)
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), nil)
	r := h.ask(t, "udp", "web.example.test", dns.TypeHTTPS)
	if len(r.Answer) != 1 {
		t.Fatalf("answers: %v", answers(r))
	}
	rr := r.Answer[0].(*dns.HTTPS)
	var keys []string
	for _, kv := range rr.Value {
		keys = append(keys, kv.Key().String()+"="+kv.String())
	}
	if diff := cmp.Diff([]string{"alpn=h2,h3", "ipv4hint=1.2.3.4"}, keys); diff != "" {
		t.Errorf("HTTPS params (-want +got):\n%s", diff)
	}
}

func TestBindingsRecorded(t *testing.T) {
	w := newWorld(t)
	w.add("www.example.test. 30 IN CNAME edge.cdn.example.test.", "www.example.test. 30 IN A 1.2.3.4")
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), func(c *Config) { c.BindingsGrace = time.Minute })
	before := time.Now()
	h.ask(t, "udp", "www.example.test", dns.TypeA)
	b := h.srv.Bindings()
	if diff := cmp.Diff([]string{"www.example.test"}, b.NamesFor("sb1", netip.MustParseAddr("1.2.3.4"))); diff != "" {
		t.Errorf("NamesFor (-want +got):\n%s", diff)
	}
	if got := b.NamesFor("other", netip.MustParseAddr("1.2.3.4")); len(got) != 0 {
		t.Errorf("another sandbox sees bindings: %v", got)
	}
	all := b.All()
	if len(all) != 1 {
		t.Fatalf("bindings: %+v", all)
	}
	exp := all[0].Expires
	if exp.Before(before.Add(90*time.Second)) || exp.After(time.Now().Add(90*time.Second)) {
		t.Errorf("expiry %v not TTL (30s) + grace (60s) from now", exp)
	}
}

func TestBindingsExpireAndBound(t *testing.T) {
	b := NewBindings(3, 0)
	a := netip.MustParseAddr("1.2.3.4")
	now := time.Now()
	b.Add("sb", "gone.test.", a, now.Add(-time.Second))
	b.Add("sb", "live.test.", a, now.Add(time.Hour))
	if diff := cmp.Diff([]string{"live.test"}, b.NamesFor("sb", a)); diff != "" {
		t.Errorf("NamesFor (-want +got):\n%s", diff)
	}
	b.Sweep(now)
	if b.Len() != 1 {
		t.Errorf("after sweep Len = %d, want 1", b.Len())
	}
	for i := range 5 {
		b.Add("sb", fmt.Sprintf("n%d.test", i), a, now.Add(time.Hour))
	}
	got := b.NamesFor("sb", a)
	slices.Sort(got)
	if diff := cmp.Diff([]string{"n2.test", "n3.test", "n4.test"}, got); diff != "" {
		t.Errorf("bounded ledger keeps the newest (-want +got):\n%s", diff)
	}
	if b.Len() != 3 {
		t.Errorf("Len = %d, want 3", b.Len())
	}
}

func TestUnknownSourceRefused(t *testing.T) {
	w := newWorld(t)
	h := startServer(t, w, idents{}, nil)
	r := h.ask(t, "udp", "www.example.test", dns.TypeA)
	if r.Rcode != dns.RcodeRefused {
		t.Fatalf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	evs := h.rec.find("www.example.test")
	if len(evs) != 1 || evs[0].Verdict != "deny" || evs[0].Reason != "unknown source" || evs[0].DNS.Client != "127.0.0.1" {
		t.Fatalf("events: %+v", evs)
	}
	if evs[0].Rule != RuleUnknownSource {
		t.Errorf("rule %q, want %q", evs[0].Rule, RuleUnknownSource)
	}
	if len(w.queries()) != 0 {
		t.Errorf("upstream saw %v", w.queries())
	}
}

func TestUpstreamDownThenRecovers(t *testing.T) {
	w := newWorld(t)
	w.add("www.example.test. 60 IN A 1.2.3.4")
	addr := w.addr
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), func(c *Config) {
		c.Timeout, c.AttemptTimeout, c.CacheSize = 400*time.Millisecond, 150*time.Millisecond, -1
	})
	w.stop()
	r := h.ask(t, "udp", "www.example.test", dns.TypeA)
	if r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("upstream down: rcode %s", dns.RcodeToString[r.Rcode])
	}
	evs := h.rec.find("www.example.test")
	if len(evs) != 1 || evs[0].DNS.RCode != "SERVFAIL" || evs[0].DNS.Upstream == "" {
		t.Fatalf("events: %+v", evs)
	}
	w.start(t, addr)
	r = h.ask(t, "udp", "www.example.test", dns.TypeA)
	if diff := cmp.Diff([]string{"1.2.3.4"}, answers(r)); diff != "" {
		t.Errorf("after recovery (-want +got):\n%s", diff)
	}
}

func TestTruncatedAnswerRetriedOverTCP(t *testing.T) {
	w := newWorld(t)
	w.set(func(w *world) { w.tcOnUDP = true })
	w.add("big.example.test. 60 IN A 1.2.3.4")
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), nil)
	r := h.ask(t, "udp", "big.example.test", dns.TypeA)
	if diff := cmp.Diff([]string{"1.2.3.4"}, answers(r)); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if got := len(w.queries()); got != 2 {
		t.Errorf("upstream saw %d queries, want UDP then TCP", got)
	}
}

func TestIdenticalQueriesCoalesced(t *testing.T) {
	w := newWorld(t)
	w.set(func(w *world) { w.delay = 200 * time.Millisecond })
	w.add("slow.example.test. 60 IN A 1.2.3.4")
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if r := h.ask(t, "udp", "slow.example.test", dns.TypeA); len(r.Answer) != 1 {
				t.Errorf("answers %v", answers(r))
			}
		})
	}
	wg.Wait()
	if got := len(w.queries()); got != 1 {
		t.Errorf("upstream saw %d queries, want 1", got)
	}
}

func TestNegativeAnswerCached(t *testing.T) {
	w := newWorld(t)
	w.set(func(w *world) { w.nx["missing.example.test."] = true })
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), nil)
	for range 3 {
		if r := h.ask(t, "udp", "missing.example.test", dns.TypeA); r.Rcode != dns.RcodeNameError || ede(r) != nil {
			t.Fatalf("rcode %s ede %v", dns.RcodeToString[r.Rcode], ede(r))
		}
	}
	if got := len(w.queries()); got != 1 {
		t.Errorf("upstream saw %d queries, want 1", got)
	}
}

func TestTTLCapped(t *testing.T) {
	w := newWorld(t)
	w.add("long.example.test. 86400 IN A 1.2.3.4")
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), func(c *Config) { c.AnswerTTL = 120 * time.Second })
	r := h.ask(t, "udp", "long.example.test", dns.TypeA)
	if ttl := r.Answer[0].Header().Ttl; ttl != 120 {
		t.Errorf("TTL %d, want 120", ttl)
	}
}

// A cached answer keeps the client's ID, letter case and RD bit, and its
// TTLs count down.
func TestCachedAnswerPatched(t *testing.T) {
	w := newWorld(t)
	w.add("case.example.test. 100 IN A 1.2.3.4")
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), nil)
	h.ask(t, "udp", "case.example.test", dns.TypeA)
	for _, netw := range []string{"udp", "tcp"} {
		r := h.ask(t, netw, "CaSe.ExAmPlE.tEsT", dns.TypeA)
		if r.Question[0].Name != "CaSe.ExAmPlE.tEsT." || !r.RecursionDesired || r.Answer[0].Header().Ttl > 100 || answers(r)[0] != "1.2.3.4" {
			t.Errorf("%s: %v", netw, r)
		}
	}
	evs := h.rec.find("case.example.test")
	if len(evs) != 3 || !evs[2].DNS.CacheHit || len(evs[2].DNS.Answers) != 1 {
		t.Errorf("events: %+v", evs)
	}
}

// A slow upstream gets SERVFAIL once the query's budget is spent.
func TestSlowUpstreamServfail(t *testing.T) {
	w := newWorld(t)
	w.add("slow.example.test. 60 IN A 1.2.3.4")
	w.set(func(w *world) { w.delay = 700 * time.Millisecond })
	h := startServer(t, w, oneSandbox(webPolicy(t, "", ""), false), func(c *Config) {
		c.Timeout, c.AttemptTimeout = 300*time.Millisecond, 100*time.Millisecond
	})
	r := h.ask(t, "udp", "slow.example.test", dns.TypeA)
	if r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	if e := ede(r); e == nil || e.InfoCode != dns.ExtendedErrorCodeNetworkError {
		t.Errorf("EDE %v", e)
	}
	if n := len(w.queries()); n < 2 {
		t.Errorf("upstream saw %d attempts, want retries", n)
	}
}

// labOperator is a lab appliance's settings: the world in 198.18.0.0/15
// is an upstream allow-range, 198.18.0.1 is the appliance's own address.
var labOperator = policies.Operator{
	Allow: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
	Own:   []netip.Addr{netip.MustParseAddr("198.18.0.1")},
}

// The operator's lab ranges are kept; the appliance's own addresses never are.
func TestUpstreamAllowAndOwnAddresses(t *testing.T) {
	w := newWorld(t)
	w.add("lab.example.test. 60 IN A 198.19.0.10", "lab.example.test. 60 IN A 198.18.0.1", "lab.example.test. 60 IN A 10.0.0.1")
	h := startServer(t, w, oneSandbox(policies.Bind(webPolicy(t, "", ""), labOperator), false), nil)
	r := h.ask(t, "udp", "lab.example.test", dns.TypeA)
	if diff := cmp.Diff([]string{"198.19.0.10"}, answers(r)); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	ev := h.rec.find("lab.example.test.")
	if len(ev) != 1 || !strings.Contains(ev[0].Reason, "198.18.0.1 (own)") || !strings.Contains(ev[0].Reason, "10.0.0.1 (private)") {
		t.Errorf("events %+v", ev)
	}
}

// TestDenyCIDRInsideUpstreamAllowStripped: an allowed name resolving into
// [deny].cidrs ∩ upstream.allow loses that address from its answer, and
// the event names the [deny] rule (docs/policy.md: a [deny] cidr is denied
// whatever any category says). Its other lab address is kept.
func TestDenyCIDRInsideUpstreamAllowStripped(t *testing.T) {
	w := newWorld(t)
	w.add("lab.example.test. 60 IN A 198.18.77.10", "lab.example.test. 60 IN A 198.18.77.11")
	p := webPolicy(t, "", "[deny]\ncidrs = [\"198.18.77.10\"]\n")
	h := startServer(t, w, oneSandbox(policies.Bind(p, labOperator), false), nil)
	r := h.ask(t, "udp", "lab.example.test", dns.TypeA)
	if diff := cmp.Diff([]string{"198.18.77.11"}, answers(r)); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	ev := h.rec.find("lab.example.test.")
	if len(ev) != 1 {
		t.Fatalf("events %+v", ev)
	}
	if d := ev[0].DNS; d.Guard != GuardRebinding || !slices.Equal(d.Stripped, []string{"198.18.77.10"}) {
		t.Errorf("dns %+v", d)
	}
	if !strings.Contains(ev[0].Reason, "198.18.77.10 (special-purpose, deny.cidrs[0])") {
		t.Errorf("reason %q does not name the [deny] rule", ev[0].Reason)
	}
}
