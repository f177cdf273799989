package policies

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// cpuClock measures the CPU time this goroutine's thread used, so that a
// benchmark on a shared, overloaded machine can report what the code costs
// apart from time spent waiting for a CPU. It reports "cpu-ns/op".
type cpuClock struct {
	start int64
	who   int
}

func startCPUClock(b *testing.B, thread bool) *cpuClock {
	c := &cpuClock{who: unix.RUSAGE_SELF}
	if thread {
		runtime.LockOSThread()
		c.who = unix.RUSAGE_THREAD
	}
	c.start = cpuNanos(c.who)
	return c
}

func (c *cpuClock) stop(b *testing.B) {
	used := cpuNanos(c.who) - c.start
	if c.who == unix.RUSAGE_THREAD {
		runtime.UnlockOSThread()
	}
	b.ReportMetric(float64(used)/float64(b.N), "cpu-ns/op")
}

func cpuNanos(who int) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(who, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
