package bpf

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// benchRounds is how many interleaved rounds BenchmarkProgram runs per
// branch; it reports the median of each program.
const benchRounds = 9

// BenchmarkProgram measures the steering program per branch with
// BPF_PROG_TEST_RUN and, in the same loop, the empty program on the same
// packet with the same repeat count. Each of benchRounds rounds runs both
// programs once with b.N repeats inside the kernel (run with
// -benchtime=1000000x or more), the order alternating between rounds so
// drift hits both alike. It reports the medians: ns/pkt, empty-ns/pkt and
// x-empty (their ratio; the kernel's own overhead makes absolute numbers
// VM-dependent).
//
// The time is this thread's CPU time across the BPF_PROG_TEST_RUN call
// divided by the repeat count: the kernel's own figure is truncated to whole
// nanoseconds, too coarse for a ratio against a ~14 ns baseline, and CPU
// time, like the kernel's timer, leaves out time the thread was scheduled
// away. The per-call set-up (skb allocation, copies) is a few microseconds
// against milliseconds of repeats. kernel-ns/pkt is the kernel's figure for
// the program's median round, as a cross-check.
//
// In these runs bpf_sk_assign fails (a test run is not at TC ingress), so
// the TCP and DNS branches measure lookup, SOCKMAP and assign attempt plus
// the drop accounting: an upper bound of the real path.
func BenchmarkProgram(b *testing.B) {
	requireRoot(b)
	p := unitPath(b, true)
	for _, br := range branches() {
		b.Run(strings.ReplaceAll(br.name, " ", "_"), func(b *testing.B) {
			benchBranch(b, p.objs.AlkSteer, p.objs.AlkEmpty, br.frame)
		})
	}
}

func benchBranch(b *testing.B, prog, empty *ebpf.Program, frame []byte) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var progs, bases []benchSample
	b.ResetTimer()
	for i := range benchRounds {
		if i%2 == 0 {
			progs = append(progs, benchOnce(b, prog, frame, b.N))
			bases = append(bases, benchOnce(b, empty, frame, b.N))
		} else {
			bases = append(bases, benchOnce(b, empty, frame, b.N))
			progs = append(progs, benchOnce(b, prog, frame, b.N))
		}
	}
	b.StopTimer()
	pm, bm := medianSample(progs), medianSample(bases)
	b.ReportMetric(pm.cpuNs, "ns/pkt")
	b.ReportMetric(bm.cpuNs, "empty-ns/pkt")
	b.ReportMetric(pm.cpuNs/bm.cpuNs, "x-empty")
	b.ReportMetric(float64(pm.kernel.Nanoseconds()), "kernel-ns/pkt")
}

// benchSample is one BPF_PROG_TEST_RUN call: CPU ns per repeat and the
// kernel's own (whole-nanosecond) duration per repeat.
type benchSample struct {
	cpuNs  float64
	kernel time.Duration
}

func benchOnce(b *testing.B, prog *ebpf.Program, frame []byte, repeat int) benchSample {
	start := threadCPU(b)
	_, d, err := prog.Benchmark(frame, repeat, nil)
	end := threadCPU(b)
	if err != nil {
		b.Fatal(err)
	}
	return benchSample{cpuNs: float64(end-start) / float64(repeat), kernel: d}
}

func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

func medianSample(s []benchSample) benchSample {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b benchSample) int {
		switch {
		case a.cpuNs < b.cpuNs:
			return -1
		case a.cpuNs > b.cpuNs:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}
