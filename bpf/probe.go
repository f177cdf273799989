package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
)

// ErrUnsupported is wrapped by Probe's errors: the kernel lacks a feature
// the path needs.
var ErrUnsupported = errors.New("kernel feature missing")

// minKernel is the first kernel with TCX links (6.6).
const minKernel = 6<<16 | 6<<8

// Probe checks every kernel feature the steering path uses and names the
// first one missing.
func Probe() error {
	if v, err := features.LinuxVersionCode(); err != nil {
		return fmt.Errorf("bpf: read kernel version: %w", err)
	} else if v < minKernel {
		return fmt.Errorf("bpf: TCX links need Linux 6.6 or later (running %d.%d): %w",
			v>>16, (v>>8)&0xff, ErrUnsupported)
	}
	if err := features.HaveProgramType(ebpf.SchedCLS); err != nil {
		return probeErr("program type sched_cls (tc)", err)
	}
	for _, m := range []struct {
		t    ebpf.MapType
		name string
	}{
		{ebpf.SockMap, "SOCKMAP"}, {ebpf.RingBuf, "ring buffer map"},
		{ebpf.PerCPUHash, "per-CPU hash map"}, {ebpf.LRUHash, "LRU hash map"},
	} {
		if err := features.HaveMapType(m.t); err != nil {
			return probeErr("map type "+m.name, err)
		}
	}
	for _, h := range []struct {
		fn   asm.BuiltinFunc
		name string
	}{
		{asm.FnSkAssign, "bpf_sk_assign"}, {asm.FnSkcLookupTcp, "bpf_skc_lookup_tcp"},
		{asm.FnSkRelease, "bpf_sk_release"}, {asm.FnRingbufReserve, "bpf_ringbuf_reserve"},
		{asm.FnSkbPullData, "bpf_skb_pull_data"}, {asm.FnKtimeGetCoarseNs, "bpf_ktime_get_coarse_ns"},
	} {
		if err := features.HaveProgramHelper(ebpf.SchedCLS, h.fn); err != nil {
			return probeErr("helper "+h.name+" for tc programs", err)
		}
	}
	return nil
}

func probeErr(what string, err error) error {
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("bpf: kernel lacks %s: %w", what, ErrUnsupported)
	}
	return fmt.Errorf("bpf: probe %s: %w", what, err)
}
