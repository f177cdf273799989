package rawio

import "time"

// LazyDeadline is when a deadline was last pushed back. Deadlines on busy
// connections are pushed back at most a few times per period — a timer
// update costs more than a small read or write — so a peer that goes
// quiet gets between 7/8 of the period and all of it.
type LazyDeadline struct{ last time.Time }

// Due reports whether a deadline of period d should be pushed back now,
// and to when. The zero value is always due.
func (l *LazyDeadline) Due(d time.Duration) (time.Time, bool) {
	now := time.Now()
	if now.Sub(l.last) <= d/8 {
		return time.Time{}, false
	}
	l.last = now
	return now.Add(d), true
}

// Reset makes the next Due call push the deadline back: something else
// set it.
func (l *LazyDeadline) Reset() { l.last = time.Time{} }
