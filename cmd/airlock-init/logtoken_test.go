package main

import (
	"testing"
	"time"
)

// TestTakeLogToken: a burst of 10 refused-peer lines, then one per 100 ms,
// with no goroutine ticking in between.
func TestTakeLogToken(t *testing.T) {
	a := &agent{}
	for i := range logBurst {
		if !a.takeLogToken() {
			t.Fatalf("line %d of the burst refused", i+1)
		}
	}
	if a.takeLogToken() {
		t.Fatal("an 11th line at once was allowed")
	}
	time.Sleep(logEvery + 20*time.Millisecond)
	if !a.takeLogToken() {
		t.Fatal("no line allowed a period later")
	}
	if a.takeLogToken() {
		t.Fatal("two lines allowed a single period later")
	}
}
