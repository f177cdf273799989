package bpf

import (
	"os"
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
const benchRounds = 11

// BenchmarkProgram measures the steering program per branch with
// BPF_PROG_TEST_RUN and, in the same loop, the empty program on the same
// packet with the same repeat count. Each of benchRounds rounds runs every
// program once with b.N repeats inside the kernel (run with
// -benchtime=1000000x or more), the order rotating between rounds so drift
// hits all alike. It reports the medians: ns/pkt, empty-ns/pkt and x-empty
// (their ratio; the kernel's own overhead makes absolute numbers
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
// AIRLOCK_BENCH_BASE names another build of c/steer.c (for example a
// previous revision's object: git show REV:bpf/steer_bpfel.o > base.o) to
// run in the same rounds against the same maps; it adds base-ns/pkt and
// base-x-empty, a before/after from one run.
//
// In these runs bpf_sk_assign fails (a test run is not at TC ingress), so
// the TCP and DNS branches measure lookup, SOCKMAP and assign attempt plus
// the drop accounting: an upper bound of the real path.
func BenchmarkProgram(b *testing.B) {
	requireRoot(b)
	p := unitPath(b, true)
	progs := []*ebpf.Program{p.objs.AlkSteer, p.objs.AlkEmpty}
	if f := os.Getenv("AIRLOCK_BENCH_BASE"); f != "" {
		progs = append(progs, loadBase(b, p, f))
	}
	for _, br := range branches() {
		b.Run(strings.ReplaceAll(br.name, " ", "_"), func(b *testing.B) {
			reportBench(b, benchBranch(b, progs, br.frame))
		})
	}
	b.Run("tcp_ack_of_a_flow_the_proxy_owns", func(b *testing.B) {
		reportBench(b, benchOwnedFlow(b, progs))
	})
}

func reportBench(b *testing.B, m []benchSample) {
	b.ReportMetric(m[0].cpuNs, "ns/pkt")
	b.ReportMetric(m[1].cpuNs, "empty-ns/pkt")
	b.ReportMetric(m[0].cpuNs/m[1].cpuNs, "x-empty")
	b.ReportMetric(float64(m[0].kernel.Nanoseconds()), "kernel-ns/pkt")
	if len(m) > 2 {
		b.ReportMetric(m[2].cpuNs, "base-ns/pkt")
		b.ReportMetric(m[2].cpuNs/m[1].cpuNs, "base-x-empty")
	}
}

// benchOwnedFlow measures the branch most packets take: a segment of a flow
// a socket already owns, found by the established-table lookup (see
// flowNS).
func benchOwnedFlow(b *testing.B, progs []*ebpf.Program) []benchSample {
	n := flowNS(b)
	var m []benchSample
	err := n.do(func() error {
		f, err := dialFlow()
		if err != nil {
			return err
		}
		defer f.close()
		m = benchBranch(b, progs, f.segment(0x10))
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// benchBranch runs every program benchRounds times on frame and returns
// each one's median sample.
func benchBranch(b *testing.B, progs []*ebpf.Program, frame []byte) []benchSample {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	samples := make([][]benchSample, len(progs))
	b.ResetTimer()
	for r := range benchRounds {
		for i := range progs {
			j := (i + r) % len(progs)
			samples[j] = append(samples[j], benchOnce(b, progs[j], frame, b.N))
		}
	}
	b.StopTimer()
	medians := make([]benchSample, len(progs))
	for i, s := range samples {
		medians[i] = medianSample(s)
	}
	return medians
}

// loadBase loads alk_steer from the object file f against p's maps.
func loadBase(b *testing.B, p *Path, f string) *ebpf.Program {
	spec, err := ebpf.LoadCollectionSpec(f)
	if err != nil {
		b.Fatalf("AIRLOCK_BENCH_BASE: %v", err)
	}
	vars := map[string]any{
		"steer_mark":      p.opts.Guard.Mark,
		"event_budget":    p.opts.EventBudget,
		"event_window_ns": uint64(p.opts.EventWindow.Nanoseconds()),
	}
	for name, v := range vars {
		if sv, ok := spec.Variables[name]; ok {
			if err := sv.Set(v); err != nil {
				b.Fatalf("AIRLOCK_BENCH_BASE: set %s: %v", name, err)
			}
		}
	}
	var objs struct {
		AlkSteer *ebpf.Program `ebpf:"alk_steer"`
	}
	err = spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"alk_config": p.objs.AlkConfig, "alk_fastcfg": p.objs.AlkFastcfg,
		"alk_sockets": p.objs.AlkSockets, "alk_stats": p.objs.AlkStats, "alk_events": p.objs.AlkEvents,
	}})
	if err != nil {
		b.Fatalf("AIRLOCK_BENCH_BASE: load %s: %+v", f, err)
	}
	b.Cleanup(func() { objs.AlkSteer.Close() })
	return objs.AlkSteer
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
