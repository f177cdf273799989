package bpf

import (
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// The budget is per CPU per window: a second flood inside the window reports
// nothing more, and once the window has passed the budget is spent afresh.
// (The program reads the clock only when jiffies moved; this is the test
// that the window still turns.) All floods run on one CPU.
func TestDropEventBudgetRenewsEachWindow(t *testing.T) {
	requireRoot(t)
	const budget, window = 5, 200 * time.Millisecond
	p := openTest(t, Options{EventBudget: budget, EventWindow: window})
	if err := p.writeConfig(configOf(1, unitNet)); err != nil {
		t.Fatal(err)
	}
	rd, err := ringbuf.NewReader(p.objs.AlkEvents)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpus unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cpus); err != nil {
		t.Fatal(err)
	}
	one := unix.CPUSet{}
	for c := range 1024 {
		if cpus.IsSet(c) {
			one.Set(c)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &cpus)

	frame := ethFrame(macSandbox, 0x0800, ipv4Packet(ipOpts{proto: 17, src: unitNet.Addr, dst: mustAddr("198.18.200.10")}, udpDatagram(1, 443, nil)))
	flood := func() int {
		if _, err := p.objs.AlkSteer.Run(&ebpf.RunOptions{Data: frame, Repeat: 100}); err != nil {
			t.Fatal(err)
		}
		n := 0 // the program wrote its records before Run returned
		for {
			rd.SetDeadline(time.Now().Add(time.Millisecond))
			if _, err := rd.Read(); err != nil {
				return n
			}
			n++
		}
	}
	start := time.Now()
	first, second := flood(), flood()
	inWindow := time.Since(start) < window
	time.Sleep(2 * window)
	third := flood()
	if first != budget {
		t.Errorf("first flood reported %d events, want the budget of %d", first, budget)
	}
	if !inWindow {
		t.Logf("the first two floods took longer than the window; not checking the second")
	} else if second != 0 {
		t.Errorf("a flood inside the same window reported %d more events, want 0", second)
	}
	if third != budget {
		t.Errorf("a flood after the window reported %d events, want a fresh budget of %d", third, budget)
	}
	s, _ := p.Stats(unitNet.Sandbox.Num)
	if s.Dropped[ReasonUDP] != 300 {
		t.Errorf("counted %d drops, want 300", s.Dropped[ReasonUDP])
	}
}
