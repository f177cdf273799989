package audit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// benchEvents is a realistic mix: dns, flow decision, http, flow close.
func benchEvents() []Event {
	var out []Event
	for _, e := range sampleEvents() {
		switch e.Kind {
		case KindDNS, KindFlow, KindHTTP:
			out = append(out, e)
		}
	}
	return out
}

// BenchmarkPipeline measures how fast producers can push events through
// the pipeline into the store and a JSONL file with nothing dropped (the
// producers wait as long as needed).
func BenchmarkPipeline(b *testing.B) {
	for _, sinks := range []string{"store+stream", "store", "stream", "stream-ocsf"} {
		b.Run(sinks, func(b *testing.B) { benchPipeline(b, sinks) })
	}
}

func benchPipeline(b *testing.B, sinks string) {
	dir := b.TempDir()
	cfg := Config{EnqueueWait: time.Hour, Logger: testLogger(&testing.T{})}
	if sinks != "stream" {
		cfg.StateDir = dir
	}
	if sinks != "store" {
		cfg.StreamPath = filepath.Join(dir, "events.jsonl")
	}
	if sinks == "stream-ocsf" {
		cfg.StateDir, cfg.StreamFormat, cfg.Node = "", FormatOCSF, "node-a.example.test"
	}
	p, err := NewPipeline(cfg)
	if err != nil {
		b.Fatal(err)
	}
	evs := benchEvents()
	const producers = 4
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += producers {
				e := evs[i%len(evs)]
				e.Time = time.Now()
				p.Emit(e)
			}
		}()
	}
	wg.Wait()
	p.Close()
	el := time.Since(start)
	b.StopTimer()
	st := p.Stats()
	if st.Dropped != 0 || st.Written != uint64(b.N) {
		b.Fatalf("lost events: %+v", st)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/event")
}

// cpuTime is the process's user+system CPU time so far. On a shared
// machine the wall-clock rate depends on what else runs; CPU per event
// says what the pipeline itself costs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSoak offers events at a fixed rate for a fixed time and reports
// what was kept and dropped. It runs only when AIRLOCK_SOAK_RATE is set
// (bench/audit-soak.sh sets it: 50,000/s and 100,000/s for 60 s each).
func BenchmarkSoak(b *testing.B) {
	rate, _ := strconv.Atoi(os.Getenv("AIRLOCK_SOAK_RATE"))
	secs, _ := strconv.Atoi(os.Getenv("AIRLOCK_SOAK_SECONDS"))
	if rate <= 0 {
		b.Skip("set AIRLOCK_SOAK_RATE (events/s) and AIRLOCK_SOAK_SECONDS, or run bench/audit-soak.sh")
	}
	if secs <= 0 {
		secs = 60
	}
	for range b.N {
		r := soak(b, rate, time.Duration(secs)*time.Second)
		b.ReportMetric(r.offered, "offered/s")
		b.ReportMetric(r.kept, "kept/s")
		b.ReportMetric(float64(r.stats.Dropped), "dropped")
		b.ReportMetric(float64(r.maxDepth), "max-queue")
		b.ReportMetric(r.drain.Seconds(), "drain-s")
		st := r.stats
		fmt.Printf("soak %d/s for %ds:\n", rate, secs)
		fmt.Printf("soak   events offered   %d (%.0f/s)\n", r.offeredN, r.offered)
		fmt.Printf("soak   events written   %d (%.0f/s incl. drain; %d accepted)\n", st.Written-st.Gaps, r.kept, st.Accepted)
		fmt.Printf("soak   events dropped   %d (lost at close %d)\n", st.Dropped, st.Lost)
		fmt.Printf("soak   gap events       %d\n", st.Gaps)
		fmt.Printf("soak   cpu              %.1fs total, %.1f µs/event\n", r.cpu.Seconds(), float64(r.cpuPerEvent.Nanoseconds())/1000)
		fmt.Printf("soak   store size       %.1f MiB (%.0f B/event); stream kept %.1f MiB\n", float64(r.storeBytes)/(1<<20),
			float64(r.storeBytes)/float64(max(st.Written, 1)), float64(r.streamBytes)/(1<<20))
		fmt.Printf("soak   rss peak         %.0f MiB\n", float64(r.rssPeak)/(1<<20))
		fmt.Printf("soak   queue max        %d/%d, drain after stop %v, store errors %d, load %s\n", r.maxDepth, st.QueueCapacity,
			r.drain.Round(time.Millisecond), st.StoreErrors, loadAvg())
		printSoakRow(rate, r)
	}
}

// printSoakRow prints one tab-separated row for bench/audit-soak.sh's
// table. Zero loss means every event offered was written (nothing dropped
// or lost); at rate means the producers offered at least 99% of the target
// (Emit's bounded wait did not hold them back).
func printSoakRow(rate int, r soakResult) {
	st := r.stats
	events := st.Written - st.Gaps
	zero := st.Dropped == 0 && st.Lost == 0 && events == st.Accepted
	fmt.Printf("soak-row\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.0f\t%.0f\t%s\t%s\t%.1f\t%s\n",
		rate, r.offeredN, events, st.Dropped, st.Gaps, float64(r.cpuPerEvent.Nanoseconds())/1000,
		float64(r.storeBytes)/(1<<20), float64(r.rssPeak)/(1<<20),
		yesNo(zero), yesNo(r.offered >= 0.99*float64(rate)), r.drain.Seconds(), strings.Fields(loadAvg())[0])
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

type soakResult struct {
	offered, kept float64
	offeredN      int64
	cpu           time.Duration
	cpuPerEvent   time.Duration
	maxDepth      int
	drain         time.Duration
	stats         Stats
	storeBytes    int64 // the store's files after Close
	streamBytes   int64 // the JSONL files (kept by rotation)
	rssPeak       int64 // VmHWM, bytes
}

func soak(b *testing.B, rate int, d time.Duration) soakResult {
	dir := b.TempDir()
	p, err := NewPipeline(Config{StateDir: dir, StreamPath: filepath.Join(dir, "events.jsonl"),
		StreamMaxFiles: 3, Logger: testLogger(&testing.T{})})
	if err != nil {
		b.Fatal(err)
	}
	evs := benchEvents()
	const producers = 4
	var offered atomic.Int64
	var maxDepth atomic.Int64
	start := time.Now()
	stop := start.Add(d)
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	for w := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			produce(p, evs, w, producers, rate, start, stop, &offered)
		}()
	}
	for time.Now().Before(stop) {
		time.Sleep(10 * time.Millisecond)
		if q := int64(p.Stats().QueueDepth); q > maxDepth.Load() {
			maxDepth.Store(q)
		}
	}
	wg.Wait()
	sent := time.Since(start)
	p.Close()
	drain := time.Since(start) - sent
	st := p.Stats()
	cpu := (cpuTime() - cpu0) / time.Duration(max(st.Accepted, 1))
	return soakResult{cpuPerEvent: cpu, cpu: cpuTime() - cpu0, offered: float64(offered.Load()) / sent.Seconds(),
		offeredN: offered.Load(), kept: float64(st.Accepted) / (sent + drain).Seconds(), maxDepth: int(maxDepth.Load()),
		drain: drain, stats: st, storeBytes: filesSize(dir, StoreFile+"*"), streamBytes: filesSize(dir, "events.jsonl*"),
		rssPeak: rssPeak()}
}

// produce emits this producer's share of rate, paced against the clock.
func produce(p *Pipeline, evs []Event, w, n, rate int, start, stop time.Time, offered *atomic.Int64) {
	share := float64(rate) / float64(n)
	sent := 0
	for i := w; ; i += n {
		now := time.Now()
		if now.After(stop) {
			return
		}
		if due := int(now.Sub(start).Seconds() * share); sent >= due {
			time.Sleep(time.Millisecond)
			continue
		}
		e := evs[i%len(evs)]
		e.Time = now
		p.Emit(e)
		sent++
		offered.Add(1)
	}
}

// filesSize sums the sizes of the files in dir matching pattern.
func filesSize(dir, pattern string) int64 {
	names, _ := filepath.Glob(filepath.Join(dir, pattern))
	var n int64
	for _, name := range names {
		if fi, err := os.Stat(name); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// rssPeak is the process's peak resident set (VmHWM) in bytes.
func rssPeak() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if len(b) > 14 {
		b = b[:14]
	}
	return string(b)
}

// BenchmarkQuery measures the filters `airlock logs` and the report use on
// a store of 100,000 records (5 sandboxes, the benchmark's event mix, with
// 50 hosts), so index changes that make writes cheaper show their cost to
// readers.
func BenchmarkQuery(b *testing.B) {
	st := benchStore(b, 100000)
	since := t0.Add(90000 * time.Millisecond)
	for _, c := range []struct {
		name string
		q    Query
	}{
		{"sandbox", Query{Sandbox: "sb-3"}},
		{"sandbox-kind", Query{Sandbox: "sb-3", Kind: KindHTTP}},
		{"kind", Query{Kind: KindDNS}},
		{"deny", Query{Verdict: "deny"}},
		{"allow", Query{Verdict: "allow", Limit: 100}},
		{"category", Query{Category: "docs"}},
		{"host", Query{Host: "h7.example.test"}},
		{"host-glob", Query{Host: "h1*"}},
		{"since", Query{Since: since}},
		{"newest-100", Query{Limit: 100, Newest: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				n = 0
				if err := st.Each(context.Background(), c.q, func(Event) error { n++; return nil }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n), "records")
		})
	}
	b.Run("top-denials", func(b *testing.B) {
		for b.Loop() {
			if _, err := st.TopDenials(context.Background(), Query{}, 10); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchStore writes n records of the benchmark mix, spread over sandboxes
// and hosts, one per millisecond from t0, and returns the store.
func benchStore(b *testing.B, n int) *Store {
	b.Helper()
	dir := b.TempDir()
	p, err := NewPipeline(Config{StateDir: dir, EnqueueWait: time.Hour, Logger: testLogger(&testing.T{})})
	if err != nil {
		b.Fatal(err)
	}
	evs := benchEvents()
	for i := range n {
		e := evs[i%len(evs)]
		e.Time = t0.Add(time.Duration(i) * time.Millisecond)
		e.Sandbox = "sb-" + strconv.Itoa(i%5)
		host := "h" + strconv.Itoa(i%50) + ".example.test"
		switch {
		case e.DNS != nil:
			d := *e.DNS
			d.QName = host
			e.DNS = &d
		case e.Flow != nil:
			f := *e.Flow
			f.Host = host
			e.Flow = &f
		case e.HTTP != nil:
			h := *e.HTTP
			h.Host = host
			e.HTTP = &h
		}
		p.Emit(e)
	}
	if err := p.Close(); err != nil {
		b.Fatal(err)
	}
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}
