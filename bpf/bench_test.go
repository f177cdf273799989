package bpf

import (
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// BenchmarkProgram measures the steering program per branch with
// BPF_PROG_TEST_RUN (b.N repeats inside the kernel; run with
// -benchtime=1000000x or more) and, in the same loop, the empty program on
// the same packet. It reports ns/pkt, empty-ns/pkt and x-empty (the ratio;
// the kernel's own overhead makes absolute numbers VM-dependent).
//
// In these runs bpf_sk_assign fails (a test run is not at TC ingress), so
// the TCP and DNS branches measure lookup, SOCKMAP and assign attempt plus
// the drop accounting: an upper bound of the real path.
func BenchmarkProgram(b *testing.B) {
	requireRoot(b)
	p := unitPath(b, true)
	empty := p.objs.AlkEmpty
	for _, br := range branches() {
		name := strings.ReplaceAll(br.name, " ", "_")
		b.Run(name, func(b *testing.B) {
			prog, base := time.Duration(1<<62), time.Duration(1<<62)
			const rounds = 5
			repeat := max(b.N/rounds, 1)
			b.ResetTimer()
			for range rounds {
				prog = min(prog, benchOnce(b, p.objs.AlkSteer, br.frame, repeat))
				base = min(base, benchOnce(b, empty, br.frame, repeat))
			}
			b.StopTimer()
			b.ReportMetric(float64(prog.Nanoseconds()), "ns/pkt")
			b.ReportMetric(float64(base.Nanoseconds()), "empty-ns/pkt")
			b.ReportMetric(float64(prog)/float64(base), "x-empty")
		})
	}
}

func benchOnce(b *testing.B, prog *ebpf.Program, frame []byte, repeat int) time.Duration {
	_, d, err := prog.Benchmark(frame, repeat, nil)
	if err != nil {
		b.Fatal(err)
	}
	return d
}
