package main

import (
	"testing"
	"time"
)

// TestP99DelayCountsStallsAndBacklog: the floor the stall probe prints is
// what a one-at-a-time server would see from the recorded gaps alone.
func TestP99DelayCountsStallsAndBacklog(t *testing.T) {
	ms := time.Millisecond
	quiet := gaps{dur: time.Second}
	if d := quiet.p99Delay(10000, 20*time.Microsecond); d != 20*time.Microsecond {
		t.Errorf("no gaps: p99 %v, want the service time 20µs", d)
	}
	// One 10 ms gap in a second at 10,000 qps: 100 queries (1%) arrive
	// in it and wait for its end; with no service time the 99th
	// percentile is the shortest of those waits, 0.1 ms.
	one := gaps{dur: time.Second, starts: []time.Duration{500 * ms}, lens: []time.Duration{10 * ms}}
	if d := one.p99Delay(10000, 0); d != 100*time.Microsecond {
		t.Errorf("one 10 ms gap, no service time: p99 %v, want 100µs", d)
	}
	// With 50 µs per query (half the server's capacity) the 100 queued
	// queries drain at 10,000 a second net after the gap: the backlog
	// holds 10 ms more, so about 200 queries wait and the 99th
	// percentile is no longer short.
	if d := one.p99Delay(10000, 50*time.Microsecond); d < 4*ms {
		t.Errorf("one 10 ms gap, 50 µs per query: p99 %v, want the backlog's wait (over 4 ms)", d)
	}
}
