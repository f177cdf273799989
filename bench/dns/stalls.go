package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// stalls measures how long the server's CPU goes without running the
// thread that holds it, which no server can do better than: one thread
// pinned to -cpu reads the clock in a loop and records every gap longer
// than -gap between two reads. It runs twice, with the load generator's
// CPU (-busy) idle and then with a thread spinning on it, as the load
// generator keeps it busy during a latency run. On a virtual machine whose
// host does not give every virtual CPU a physical one at once, the second
// run shows the stalls the host imposes.
//
// From the busy run's gaps it also prints the p99 those stalls alone
// impose on queries arriving evenly at -qps on a server that spends -svc
// on each and never waits for anything else: a query that arrives during
// a gap, or behind the backlog a gap left, waits. That is a floor under
// the p99 of any server that costs -svc per query, at that rate, on this
// machine in that moment.
func stalls(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("stalls", flag.ExitOnError)
	cpu := fs.Int("cpu", 0, "the server's CPU")
	busy := fs.Int("busy", 1, "the load generator's CPU (-1: no busy run)")
	dur := fs.Duration("dur", 5*time.Second, "each run's length")
	gap := fs.Duration("gap", 200*time.Microsecond, "the shortest gap recorded")
	qps := fs.Int("qps", 0, "the query rate for the p99 floor (0: no floor)")
	svc := fs.Duration("svc", 0, "the server's time per query, for the p99 floor")
	_ = fs.Parse(args)
	if *dur <= 0 || *gap <= 0 || *svc < 0 {
		return fmt.Errorf("stalls: -dur and -gap must be positive, -svc not negative")
	}
	if *qps < 0 || *qps > 10_000_000 {
		return fmt.Errorf("stalls: -qps %d: want 0 (no floor) up to 10000000", *qps)
	}
	if *cpu < 0 || *cpu >= runtime.NumCPU() || *busy >= runtime.NumCPU() || *busy == *cpu {
		return fmt.Errorf("stalls: -cpu %d and -busy %d must be distinct CPUs of %d", *cpu, *busy, runtime.NumCPU())
	}
	idle, err := probeGaps(ctx, *cpu, *dur, *gap)
	if err != nil {
		return err
	}
	if *busy < 0 {
		fmt.Printf("cpu %d: %s\n", *cpu, idle)
		return nil
	}
	fmt.Printf("cpu %d, cpu %d idle: %s\n", *cpu, *busy, idle)
	var stop atomic.Bool
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread exits with the goroutine
		if err := pin(*busy); err != nil {
			started <- err
			return
		}
		started <- nil
		for !stop.Load() {
		}
	}()
	if err := <-started; err != nil {
		return err
	}
	loaded, err := probeGaps(ctx, *cpu, *dur, *gap)
	stop.Store(true)
	if err != nil {
		return err
	}
	fmt.Printf("cpu %d, cpu %d busy: %s\n", *cpu, *busy, loaded)
	if *qps > 0 {
		fmt.Printf("p99 of a server that spends %s per query, from these stalls alone, at %d qps: %d us\n",
			*svc, *qps, loaded.p99Delay(*qps, *svc).Microseconds())
	}
	return nil
}

// gaps is one probe run: each gap as its start and length.
type gaps struct {
	dur    time.Duration
	least  time.Duration   // the shortest gap recorded
	starts []time.Duration // since the run began
	lens   []time.Duration
}

func (g gaps) String() string {
	var over1, over4 int
	var lost, longest time.Duration
	for _, l := range g.lens {
		if l > time.Millisecond {
			over1++
		}
		if l > 4*time.Millisecond {
			over4++
		}
		lost += l
		longest = max(longest, l)
	}
	return fmt.Sprintf("%d stalls over 1 ms, %d over 4 ms, longest %.1f ms, %.2f%% of the time in gaps over %d us, in %s",
		over1, over4, float64(longest)/1e6, 100*float64(lost)/float64(g.dur), g.least.Microseconds(), g.dur)
}

// p99Delay is the 99th percentile of the time from arrival to answer of
// queries arriving every 1/qps over the run at a server that spends svc
// on each, one at a time, and runs only outside the gaps: a query that
// arrives during a gap, or behind the queue a gap left, waits.
func (g gaps) p99Delay(qps int, svc time.Duration) time.Duration {
	every := time.Second / time.Duration(qps)
	delays := make([]time.Duration, 0, int(g.dur/every))
	var free time.Duration // when the server finishes what it holds
	k := 0                 // the first gap that may still matter
	// run advances t past the gaps it falls in.
	run := func(t time.Duration) time.Duration {
		for k < len(g.starts) && g.starts[k]+g.lens[k] <= t {
			k++
		}
		if k < len(g.starts) && g.starts[k] <= t {
			t = g.starts[k] + g.lens[k]
			k++
		}
		return t
	}
	for t := time.Duration(0); t < g.dur; t += every {
		start := run(max(t, free))
		end := start + svc
		// A gap that opens while the query is served pauses it.
		for j := k; j < len(g.starts) && g.starts[j] < end; j++ {
			end += g.lens[j]
		}
		free = end
		delays = append(delays, end-t)
	}
	if len(delays) == 0 {
		return 0
	}
	slices.Sort(delays)
	return delays[len(delays)*99/100]
}

// probeGaps pins a thread to cpu and records the gaps between its clock
// reads longer than least, for dur.
func probeGaps(ctx context.Context, cpu int, dur, least time.Duration) (gaps, error) {
	type result struct {
		g   gaps
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := pin(cpu); err != nil {
			ch <- result{err: err}
			return
		}
		g := gaps{dur: dur, least: least}
		start := time.Now()
		last := start
		for {
			now := time.Now()
			if d := now.Sub(last); d > least {
				g.starts = append(g.starts, last.Sub(start))
				g.lens = append(g.lens, d)
			}
			last = now
			if now.Sub(start) >= dur || ctx.Err() != nil {
				break
			}
		}
		ch <- result{g: g}
	}()
	r := <-ch
	return r.g, r.err
}

// pin binds the calling (locked) thread to cpu.
func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to cpu %d: %w", cpu, err)
	}
	return nil
}
