package preview

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"airlock/audit"
)

// Requests to hosts that name no live preview are rate-limited per client
// (429 over it) and their records aggregated: the first of an interval at
// once, the rest as one record with ingress.count when the interval ends.
// A client that goes quiet is forgotten.
func TestStrayRequestsLimitedAndAggregated(t *testing.T) {
	r := newRig(t, Limits{}, func(c *Config) { c.StrayRate, c.StrayBurst = 0.001, 5 })
	c := r.client()
	hosts := []string{"pv0123456789abcdef." + testHost, "nope." + testHost, "pv0123456789abcdef.elsewhere.test", "127.0.0.1"}
	var statuses []int
	for i := 0; i < 20; i++ {
		resp, _ := get(t, c, "https://x."+testHost+"/", "Host", hosts[i%len(hosts)])
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	for i, s := range statuses {
		limited := s == http.StatusTooManyRequests
		if limited != (i >= 5) {
			t.Fatalf("statuses %v: want the first 5 answered (400/404) and the rest 429", statuses)
		}
	}
	first := r.ev.of(audit.KindIngress)
	if len(first) != 1 || first[0].Ingress.Count != 0 || first[0].Ingress.Status != http.StatusNotFound || first[0].Verdict != "deny" ||
		first[0].ID != "pv0123456789abcdef" {
		t.Fatalf("before the interval ends: %s, want the first request's record alone", describeIngress(first))
	}
	r.advance(11 * time.Second)
	waitFor(t, func() bool { return len(r.ev.of(audit.KindIngress)) == 2 })
	agg := r.ev.of(audit.KindIngress)[1]
	if in := agg.Ingress; in.Count != 19 || in.Client != "127.0.0.1" || in.Status != http.StatusTooManyRequests || agg.Verdict != "deny" {
		t.Errorf("aggregate %s, want count 19 from client 127.0.0.1, last status 429", describeIngress([]audit.Event{agg}))
	}
	if n := r.m.strays.len(); n != 1 {
		t.Errorf("%d clients tracked after an active interval, want 1", n)
	}
	r.advance(11 * time.Second)
	waitFor(t, func() bool { return r.m.strays.len() == 0 })
	if n := len(r.ev.of(audit.KindIngress)); n != 2 {
		t.Errorf("%d ingress records after a quiet interval, want still 2", n)
	}
	// A new interval: the client's first request is written at once again,
	// and its limit has refilled.
	if resp, _ := get(t, c, "https://x."+testHost+"/", "Host", hosts[0]); resp.StatusCode != http.StatusNotFound {
		t.Errorf("after the quiet interval: %d, want 404", resp.StatusCode)
	}
	if n := len(r.ev.of(audit.KindIngress)); n != 3 {
		t.Errorf("%d ingress records, want the new interval's first at once", n)
	}
}

// The table of clients is bounded: past StrayClients every new client
// shares one limit and one record.
func TestStrayClientsBounded(t *testing.T) {
	s := newStrays(0.001, 2, 8)
	now := time.Now()
	ev := func(client string) audit.Event {
		e := audit.New(audit.KindIngress, "")
		e.Ingress = &audit.Ingress{Client: client + ":4000", Status: 404}
		return e
	}
	written := 0
	for i := 0; i < 10000; i++ {
		key := clientKey(fmt.Sprintf("198.18.%d.%d:4000", i/256, i%256))
		s.allow(key, now)
		if _, ok := s.note(key, ev(key)); ok {
			written++
		}
	}
	if n := s.len(); n != 9 {
		t.Fatalf("%d clients tracked, want 8 plus the shared one", n)
	}
	if written != 9 {
		t.Errorf("%d records written at once, want one per tracked key (9)", written)
	}
	if c, _ := s.client("198.18.200.1"); c.limit.AllowN(now, 1) {
		t.Error("a client past the table has its own fresh limit; want the shared, spent one")
	}
	aggs := s.flush(now)
	if len(aggs) != 1 || aggs[0].Ingress.Client != overflowKey || aggs[0].Ingress.Count != 10000-9 {
		t.Errorf("aggregates %s, want one for %q counting %d", describeIngress(aggs), overflowKey, 10000-9)
	}
	if s.flush(now); s.len() != 0 {
		t.Errorf("%d clients after a quiet interval, want 0", s.len())
	}
}

func TestClientKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"198.18.0.9:5000", "198.18.0.9"},
		{"[::ffff:198.18.0.9]:5000", "198.18.0.9"},
		{"[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::7]:443", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:1", "fe80::/64"},
		{"garbage", overflowKey},
		{"", overflowKey},
	} {
		if got := clientKey(tc.in); got != tc.want {
			t.Errorf("clientKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Requests over a preview's own rate limit are one record at once and one
// aggregate per interval, not one each.
func TestThrottledRequestsAggregated(t *testing.T) {
	r := newRig(t, Limits{}, func(c *Config) { c.Rate, c.Burst = 0.001, 2 })
	_, port := app(t)
	p, _ := r.expose(t, port)
	c := r.client()
	for i := 0; i < 12; i++ {
		get(t, c, p.URL, "Authorization", "Bearer tok-alice")
	}
	throttled := func() []audit.Event {
		var out []audit.Event
		for _, e := range r.ev.of(audit.KindIngress) {
			if e.Ingress.Status == http.StatusTooManyRequests {
				out = append(out, e)
			}
		}
		return out
	}
	if got := throttled(); len(got) != 1 || got[0].ID != p.ID || got[0].Sandbox != "sb1" {
		t.Fatalf("429 records before the interval ends: %s, want one", describeIngress(got))
	}
	r.advance(11 * time.Second)
	waitFor(t, func() bool { return len(throttled()) == 2 })
	if agg := throttled()[1]; agg.Ingress.Count != 9 || agg.ID != p.ID || agg.Verdict != "deny" {
		t.Errorf("aggregate %s, want count 9 for %s", describeIngress([]audit.Event{agg}), p.ID)
	}
}

func describeIngress(evs []audit.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "[%s %s %s %+v] ", e.ID, e.Verdict, e.Sandbox, *e.Ingress)
	}
	return b.String()
}
