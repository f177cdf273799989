package dnsd

import (
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Bytes of live heap one distinct name costs at most once answered: its
// cache entry (packed and parsed answer, key, LRU node) and its binding in
// the ledger. bench/dns.sh states dnsd's memory bound with these numbers:
// RSS ≤ start + 2 × (CacheSize × maxCacheEntryBytes + BindingsSize ×
// maxBindingBytes), 2× being the heap growth GOGC=100 allows between
// collections.
const (
	maxCacheEntryBytes = 1024
	maxBindingBytes    = 192
)

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemoryPerName fills the cache and the ledger with names shaped like
// the benchmark's (one A record each) and checks the live heap per name
// against the bounds above.
func TestMemoryPerName(t *testing.T) {
	const n = 20000
	up := new(dns.Msg)
	up.SetQuestion("www.example.test.", dns.TypeA)
	up.Answer = append(up.Answer, &dns.A{Hdr: dns.RR_Header{Name: "www.example.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 3600}, A: net.IPv4(1, 2, 3, 4)})
	measure := func(cacheSize, bindings int) float64 {
		p := webPolicy(t, "", "")
		s, err := New(Config{Identifier: oneSandbox(p, false), Emitter: &countEmitter{},
			Upstreams: []Upstream{{Addr: "127.0.0.1:1"}}, CacheSize: cacheSize, BindingsSize: bindings, BindingsGrace: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		s.fwd.x = fuzzExchanger{wire(t, up)}
		w := &discardWriter{fakeWriter{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}}
		req := new(dns.Msg)
		before := liveHeap()
		for i := range n {
			req.SetQuestion(fmt.Sprintf("m%d.bench.example.test.", i), dns.TypeA)
			s.ServeDNS(w, req)
		}
		after := liveHeap()
		if s.cache != nil {
			held := 0
			for _, sh := range s.cache.shards {
				held += sh.Len()
			}
			if held != n {
				t.Fatalf("cache holds %d entries, want %d", held, n)
			}
		}
		runtime.KeepAlive(s)
		return float64(after-before) / n
	}
	ledger := measure(-1, 2*n) // no cache: the bindings alone
	both := measure(2*n, 2*n)  // cache (room for all) and bindings
	entry := both - ledger
	t.Logf("live heap per name: cache entry %.0f B, binding %.0f B", entry, ledger)
	if entry > maxCacheEntryBytes || ledger > maxBindingBytes {
		t.Errorf("per name: cache entry %.0f B (bound %d), binding %.0f B (bound %d)", entry, maxCacheEntryBytes, ledger, maxBindingBytes)
	}
}
