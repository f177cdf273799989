package pkgcache

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// TestBenchIndexMemory measures for bench/packages.sh the memory of the
// index; it runs only when AIRLOCK_BENCH_PKGCACHE says what to do with
// the cache in AIRLOCK_BENCH_PKGCACHE_DIR:
//
//	fill    store AIRLOCK_BENCH_PKGCACHE_N artifacts (default 10,000) in
//	        an empty cache, and measure the index they make
//	reopen  open that cache, its index read from disk (run it in a
//	        process of its own, so nothing else is in its heap)
//
// The result is one line "BENCH {json}" on stdout: the heap and the
// resident set before and after, in bytes (after a collection that
// returns free memory to the system).
func TestBenchIndexMemory(t *testing.T) {
	mode, dir := os.Getenv("AIRLOCK_BENCH_PKGCACHE"), os.Getenv("AIRLOCK_BENCH_PKGCACHE_DIR")
	if mode == "" {
		t.Skip("skipping: a measurement for bench/packages.sh (set AIRLOCK_BENCH_PKGCACHE)")
	}
	if dir == "" {
		t.Fatal("AIRLOCK_BENCH_PKGCACHE_DIR: not set")
	}
	n, err := strconv.Atoi(cmp.Or(os.Getenv("AIRLOCK_BENCH_PKGCACHE_N"), "10000"))
	if err != nil || n < 1 {
		t.Fatalf("AIRLOCK_BENCH_PKGCACHE_N %q is not a positive count", os.Getenv("AIRLOCK_BENCH_PKGCACHE_N"))
	}
	before := measure()
	var c *Cache
	switch mode {
	case "fill":
		c = open(t, dir, 1<<40)
		if c.Stats().Entries != 0 {
			t.Fatalf("%s: not an empty cache", dir)
		}
		fillIndex(t, c, n)
	case "reopen":
		c = open(t, dir, 1<<40)
	default:
		t.Fatalf("AIRLOCK_BENCH_PKGCACHE %q: want fill or reopen", mode)
	}
	after := measure()
	st := c.Stats()
	if mode == "reopen" && (st.Entries == 0 || st.Corrupt != 0) {
		t.Fatalf("reopened %s: %+v", dir, st)
	}
	fi, err := os.Stat(filepath.Join(dir, indexFile))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"part": "index", "mode": mode, "entries": st.Entries, "index_file_bytes": fi.Size(),
		"heap_before": before.heap, "heap_after": after.heap, "rss_before": before.rss, "rss_after": after.rss})
	fmt.Printf("BENCH %s\n", b)
	runtime.KeepAlive(c)
}
