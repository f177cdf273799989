package dnsd

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

func TestRedactName(t *testing.T) {
	long := strings.Repeat("q", 70)
	for _, tc := range []struct {
		name, scope, want string
		truncated         bool
	}{
		{"c2VjcmV0LXRva2Vu.example.test.", "", "c2VjcmV0...(+8 bytes).example.test.", true},
		{"a.b.c.d.e.f.g.example.test.", "", "a.b.c.d....(+5 bytes).example.test.", true},
		{"c2VjcmV0LXRva2Vu.pkg.example.test.", "pkg.example.test.", "c2VjcmV0...(+8 bytes).pkg.example.test.", true},
		{"c2VjcmV0LXRva2Vu.pkg.example.test.", "pkg.example.test", "c2VjcmV0...(+8 bytes).pkg.example.test.", true},
		{"c2VjcmV0LXRva2Vu.shop.co.uk.", "", "c2VjcmV0...(+8 bytes).shop.co.uk.", true},
		{"c2VjcmV0LXRva2Vu.test.", "", "c2VjcmV0...(+8 bytes).test.", true}, // the registrable domain would be all of it
		{long + ".test.", "", long[:8] + "...(+62 bytes).test.", true},
		{"short.example.test.", "", "short.example.test.", false},
		{"x5.chunk.example.test.", "chunk.example.test.", "x5.chunk.example.test.", false},
		{"example.test.", "", "example.test.", false},
		{"c2VjcmV0LXRva2Vu.", "", "c2VjcmV0...(+8 bytes).", true},
	} {
		got, truncated, sum := redactName(tc.name, tc.scope)
		if got != tc.want || truncated != tc.truncated {
			t.Errorf("redactName(%q, %q) = %q %v, want %q %v", tc.name, tc.scope, got, truncated, tc.want, tc.truncated)
		}
		full := sha256.Sum256([]byte(tc.name))
		if want := hex.EncodeToString(full[:16]); truncated && sum != want || !truncated && sum != "" {
			t.Errorf("redactName(%q): hash %q, want %q (only when truncated)", tc.name, sum, want)
		}
	}
}

// syncBuffer is a log destination the server's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGuardRefusedNamesStoredTruncated: through the real server, a name
// each exfiltration guard refuses reaches neither the event nor the log
// in clear — only its first bytes, the destination and a hash of the
// whole — and the event says it was truncated. An answered name is kept
// whole.
func TestGuardRefusedNamesStoredTruncated(t *testing.T) {
	w := newWorld(t)
	w.add("ok.example.test. 60 IN A 1.2.3.4")
	var logs syncBuffer
	p := webPolicy(t, "max_label = 40\nmax_name = 120\nnames_per_parent = 3\n", "")
	h := startServer(t, w, oneSandbox(p, false), func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	secret := "c2VjcmV0LXRva2VuLXZhbHVlLTEyMzQ1Njc4OTAtYWJjZGVmZ2hpams" // 56 bytes: over max_label
	chunks := []string{"aaaaaaaa11111111", "bbbbbbbb22222222", "cccccccc33333333", "dddddddd44444444"}
	long := "a23456789.b23456789.c23456789.d23456789.e23456789.f23456789.g23456789.h23456789.i23456789.j23456789.k23456789.example.test"
	cases := []struct {
		name, guard, clear, data string
	}{
		{secret + ".example.test", GuardLabelLength, ".example.test.", secret[redactKeep:]},
		{long, GuardNameLength, ".example.test.", long[redactKeep:strings.Index(long, ".example.test")]},
		{chunks[3] + ".pkg.example.test", GuardParent, ".pkg.example.test.", chunks[3][redactKeep:]},
	}
	for _, c := range chunks[:3] {
		h.ask(t, "udp", c+".pkg.example.test", dns.TypeA)
	}
	for _, tc := range cases {
		if r := h.ask(t, "udp", tc.name, dns.TypeA); r.Rcode != dns.RcodeNameError {
			t.Fatalf("%s: %s, want NXDOMAIN from the guard", tc.guard, dns.RcodeToString[r.Rcode])
		}
		evs := h.rec.find(tc.name)
		if len(evs) != 1 {
			t.Fatalf("%s: %d events", tc.guard, len(evs))
		}
		d := evs[0].DNS
		if d.Guard != tc.guard || !d.QNameTruncated || !strings.HasSuffix(d.QName, tc.clear) || len(d.QNameSHA256) != 32 {
			t.Errorf("%s: event dns %+v", tc.guard, d)
		}
		j, _ := json.Marshal(evs[0])
		if strings.Contains(string(j), strings.ToLower(tc.data)) {
			t.Errorf("%s: the event keeps the data in clear: %s", tc.guard, j)
		}
		if !strings.Contains(string(j), `"qname_truncated":true`) {
			t.Errorf("%s: the event does not say it was truncated: %s", tc.guard, j)
		}
		if strings.Contains(logs.String(), strings.ToLower(tc.data)) {
			t.Errorf("%s: the log keeps the data in clear:\n%s", tc.guard, logs.String())
		}
	}
	h.ask(t, "udp", "ok.example.test", dns.TypeA)
	if evs := h.rec.find("ok.example.test"); len(evs) != 1 || evs[0].DNS.QNameTruncated || evs[0].DNS.QNameSHA256 != "" {
		t.Errorf("an answered name was truncated: %+v", evs)
	}
	if !strings.Contains(logs.String(), fmt.Sprintf("qname=%s", "ok.example.test.")) {
		t.Errorf("the answered name is not logged whole:\n%s", logs.String())
	}
}

// FuzzRedactName: any name and scope give a name no longer than the
// input plus the marker, keeping at most redactKeep bytes of what it cut,
// and a hash exactly when it cut.
func FuzzRedactName(f *testing.F) {
	f.Add("c2VjcmV0LXRva2Vu.pkg.example.test.", "pkg.example.test.")
	f.Add("a.b.c.d.e.f.g.example.test.", "")
	f.Add(".", "")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, name, scope string) {
		got, truncated, sum := redactName(name, scope)
		if !truncated {
			if got != name || sum != "" {
				t.Fatalf("not truncated but changed: %q -> %q %q", name, got, sum)
			}
			return
		}
		if len(sum) != 2*redactHashBytes || !strings.Contains(got, "...(+") {
			t.Fatalf("truncated %q -> %q, hash %q", name, got, sum)
		}
		if !strings.HasPrefix(name, got[:redactKeep]) {
			t.Fatalf("%q -> %q does not start with the name's first bytes", name, got)
		}
	})
}

// TestRedactOncePerQuery: the event and the logs of a guard-refused query
// keep the same cut name, made once: asking again costs nothing.
func TestRedactOncePerQuery(t *testing.T) {
	q := &query{name: strings.Repeat("exfil", 20) + ".example.test.", guard: GuardLabelLength}
	first := q.logName()
	if !strings.Contains(first, "...(+") {
		t.Fatalf("not cut: %q", first)
	}
	if n := testing.AllocsPerRun(20, func() {
		if q.logName() != first {
			t.Fatal("a second redaction differs")
		}
	}); n != 0 {
		t.Fatalf("each ask redacts again: %v allocations", n)
	}
}
