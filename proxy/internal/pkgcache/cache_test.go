package pkgcache

import (
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

func sriOf(b []byte) string {
	s := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(s[:])
}

func put(t testing.TB, c *Cache, scope, name string, body []byte) string {
	t.Helper()
	sri := sriOf(body)
	w, err := c.Create(Meta{Scope: scope, SRI: sri, Ecosystem: "npm", Name: name, Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(body)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	return sri
}

func read(t *testing.T, c *Cache, scope, sri string) (string, bool) {
	t.Helper()
	h, ok := c.Get(scope, []string{sri})
	if !ok {
		return "", false
	}
	defer h.File.Close()
	b, _ := io.ReadAll(h.File)
	return string(b), true
}

func open(t *testing.T, dir string, max int64) *Cache {
	t.Helper()
	c, err := Open(dir, max)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCacheStoreGetScope(t *testing.T) {
	c := open(t, t.TempDir(), 1<<20)
	sri := put(t, c, "", "a", []byte("artifact a"))
	if got, ok := read(t, c, "", sri); !ok || got != "artifact a" {
		t.Fatalf("get = %q %v", got, ok)
	}
	priv := put(t, c, "private|alice", "p", []byte("private p"))
	if _, ok := read(t, c, "private|bob", priv); ok {
		t.Fatal("a scoped entry was served in another scope")
	}
	if _, ok := read(t, c, "private|alice", priv); !ok {
		t.Fatal("a scoped entry was not served in its scope")
	}
	if st := c.Stats(); st.Hits != 2 || st.Misses != 1 || st.Entries != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCacheRefusesWrongBytes(t *testing.T) {
	c := open(t, t.TempDir(), 1<<20)
	w, _ := c.Create(Meta{SRI: sriOf([]byte("good")), Name: "x"})
	w.Write([]byte("evil"))
	if err := w.Commit(); err == nil || c.Stats().Entries != 0 {
		t.Fatalf("commit of wrong bytes = %v, entries %d", err, c.Stats().Entries)
	}
}

func TestCacheTamperedEntryDropped(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 1<<20)
	sri := put(t, c, "", "a", []byte("artifact a"))
	if err := os.WriteFile(c.blob(Key("", sri)), []byte("artifact b"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := read(t, c, "", sri); ok {
		t.Fatal("a tampered entry was served")
	}
	if st := c.Stats(); st.Corrupt != 1 || st.Entries != 0 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := os.Stat(c.blob(Key("", sri))); err == nil {
		t.Fatal("the tampered file stays")
	}
}

func TestCacheLRUBound(t *testing.T) {
	c := open(t, t.TempDir(), 100)
	a := put(t, c, "", "a", []byte(strings.Repeat("a", 40)))
	b := put(t, c, "", "b", []byte(strings.Repeat("b", 40)))
	read(t, c, "", a) // a is now the most recent
	put(t, c, "", "c", []byte(strings.Repeat("c", 40)))
	st := c.Stats()
	if st.Bytes > 100 || st.Entries != 2 || st.Evictions != 1 {
		t.Fatalf("stats %+v", st)
	}
	if _, ok := read(t, c, "", b); ok {
		t.Fatal("the least recently used entry was kept")
	}
	if _, ok := read(t, c, "", a); !ok {
		t.Fatal("a recently used entry was evicted")
	}
}

func TestCacheSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 1<<20)
	a := put(t, c, "", "a", []byte("artifact a"))
	b := put(t, c, "", "b", []byte("artifact b"))
	read(t, c, "", a)
	c.Close()
	c2 := open(t, dir, 1<<20)
	if got, ok := read(t, c2, "", b); !ok || got != "artifact b" {
		t.Fatalf("after restart get = %q %v", got, ok)
	}
	if l := c2.List(); len(l) != 2 || l[0].Name != "b" || l[1].Hits != 1 {
		t.Fatalf("after restart list %+v", l)
	}
	// A restart with a smaller bound evicts the oldest.
	c2.Close()
	c3 := open(t, dir, 10)
	if l := c3.List(); len(l) != 1 || l[0].Name != "b" {
		t.Fatalf("after a smaller restart list %+v", l)
	}
}

func TestCacheCorruptIndexDropped(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 1<<20)
	a := put(t, c, "", "a", []byte("artifact a"))
	b := put(t, c, "", "b", []byte("artifact b"))
	c.Close()
	idx := filepath.Join(dir, indexFile)
	raw, _ := os.ReadFile(idx)
	// Change entry b's recorded size, keep the line's digest: the line
	// no longer checks.
	lines := strings.SplitAfter(string(raw), "\n")
	for i, l := range lines {
		if strings.Contains(l, `"name":"b"`) {
			lines[i] = strings.Replace(l, `"size":10`, `"size":11`, 1)
		}
	}
	os.WriteFile(idx, []byte(strings.Join(lines, "")+"garbage line\n"), 0o600)
	c2 := open(t, dir, 1<<20)
	if st := c2.Stats(); st.Corrupt != 2 || st.Entries != 1 {
		t.Fatalf("stats %+v", st)
	}
	if _, ok := read(t, c2, "", b); ok {
		t.Fatal("an entry of a corrupt index line was served")
	}
	if _, ok := read(t, c2, "", a); !ok {
		t.Fatal("a good entry was lost")
	}
	if _, err := os.Stat(c2.blob(Key("", b))); err == nil {
		t.Fatal("the file of a dropped entry stays")
	}
}

func TestCachePurge(t *testing.T) {
	c := open(t, t.TempDir(), 1<<20)
	put(t, c, "", "a", []byte("artifact a"))
	put(t, c, "", "b", []byte("artifact b"))
	n, bytes, err := c.Purge(func(m Meta) bool { return m.Name == "a" })
	if err != nil || n != 1 || bytes != 10 || c.Stats().Entries != 1 {
		t.Fatalf("purge = %d %d %v", n, bytes, err)
	}
}

// TestCacheIndexMemory: the index of 10,000 artifacts, reopened from
// disk, stays small (reported with -v).
func TestCacheIndexMemory(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 1<<40)
	fillIndex(t, c, 10000)
	c.Close()
	before := measure()
	c2 := open(t, dir, 1<<40)
	after := measure()
	heap := after.heap - before.heap
	t.Logf("index of %d artifacts: heap %.2f MiB; process RSS %.1f MiB", c2.Stats().Entries, float64(heap)/(1<<20), float64(after.rss)/(1<<20))
	if c2.Stats().Entries != 10000 {
		t.Fatalf("entries after reopen %d", c2.Stats().Entries)
	}
	if heap > 16<<20 {
		t.Fatalf("index of 10,000 artifacts takes %d bytes of heap, over 16 MiB", heap)
	}
	runtime.KeepAlive(c2)
}

// fillIndex stores n small artifacts of distinct names.
func fillIndex(t testing.TB, c *Cache, n int) {
	for i := range n {
		put(t, c, "", fmt.Sprintf("package-%05d", i), []byte(fmt.Sprintf("artifact %d", i)))
	}
}

// memory is the heap in use and the process's resident set, in bytes.
type memory struct{ heap, rss int64 }

// measure collects garbage, returns what it can to the system (so the
// resident set follows the heap) and reads both.
func measure() memory {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memory{heap: int64(ms.HeapAlloc), rss: rss()}
}

// rss is VmRSS of this process in bytes, -1 when unknown.
func rss() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if kb, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			if err == nil {
				return n << 10
			}
		}
	}
	return -1
}
