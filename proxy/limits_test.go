package proxy

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"airlock/policies"
)

// A flood of distinct keys (sandboxes come and go) cannot grow the rate
// limiter table past its bound, nor the heap with it.
func TestLimitersFloodOfKeysIsBounded(t *testing.T) {
	var l limiters
	r := policies.Rate{N: 5, Per: int64(time.Minute)}
	now := time.Unix(1_000_000, 0)
	var before, after runtime.MemStats
	flood := func(from, to int) {
		for i := from; i < to; i++ {
			if !l.get(fmt.Sprintf("sb-%d\x00cat", i), r, now).AllowN(now, 1) {
				t.Fatalf("key %d: a new key's first request was refused", i)
			}
		}
	}
	flood(0, maxLimiters)
	runtime.GC()
	runtime.ReadMemStats(&before)
	flood(maxLimiters, 5*maxLimiters)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := l.len(); n > maxLimiters {
		t.Fatalf("%d buckets kept, want at most %d", n, maxLimiters)
	}
	// Four times as many keys again: the heap stays about where the first
	// full table left it (well under one more table's worth).
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 2<<20 {
		t.Errorf("heap grew %d bytes over 4x%d more keys", grew, maxLimiters)
	}
}

// Buckets that refilled completely are dropped as new keys arrive; an
// active bucket keeps its state and its limit.
func TestLimitersDropIdleKeepActive(t *testing.T) {
	var l limiters
	r := policies.Rate{N: 2, Per: int64(time.Second)}
	t0 := time.Unix(1_000_000, 0)
	for i := range 100 {
		l.get(fmt.Sprintf("old-%d", i), r, t0).AllowN(t0, 1)
	}
	t1 := t0.Add(time.Minute) // every old bucket has refilled
	busy := l.get("busy", r, t1)
	for i := range 2 {
		if !busy.AllowN(t1, 1) {
			t.Fatalf("request %d of a rate of 2/s was refused", i+1)
		}
	}
	for i := range 100 {
		l.get(fmt.Sprintf("new-%d", i), r, t1)
	}
	if n := l.len(); n > 101+2 {
		t.Errorf("%d buckets kept; the 100 idle ones should have been dropped", n)
	}
	if l.get("busy", r, t1).AllowN(t1, 1) {
		t.Error("a third request within the second was allowed: the active bucket lost its state")
	}
}
