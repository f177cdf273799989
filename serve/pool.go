package serve

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"airlock/bpf"
	"airlock/runner"
)

// PoolConfig is `[pool]`: warm sandboxes made ahead of demand, per image
// or template, claimed by a create that matches (docs/config.md).
type PoolConfig struct {
	// Images and Templates map an image reference or a template name
	// (NAME or NAME:vN) to how many members to keep ready.
	Images    map[string]int `toml:"images"`
	Templates map[string]int `toml:"templates"`
	// MaxAge recycles members older than this (default 30m).
	MaxAge Duration `toml:"max_age"`
	// MaxTotal bounds the members of all pools (default: the sum).
	MaxTotal int `toml:"max_total"`
	// Refill is how often the pools are topped up (and after each claim).
	Refill Duration `toml:"refill"`
}

// maxPoolSize bounds one pool's size.
const maxPoolSize = 256

// members is how many addresses the pools can take at once.
func (p PoolConfig) members() int {
	n := 0
	for _, v := range p.Images {
		n += v
	}
	for _, v := range p.Templates {
		n += v
	}
	if p.MaxTotal > 0 && p.MaxTotal < n {
		return p.MaxTotal
	}
	return n
}

func (p PoolConfig) validate(add addFunc, capacity, max int) {
	for _, x := range []struct {
		key string
		m   map[string]int
	}{{"pool.images", p.Images}, {"pool.templates", p.Templates}} {
		for name, n := range x.m {
			if n < 0 || n > maxPoolSize {
				add(x.key, "%s: %q = %d: a pool's size is 0 to %d", x.key, name, n, maxPoolSize)
			}
			if name == "" {
				add(x.key, "%s: an empty name", x.key)
			}
		}
	}
	if p.MaxTotal < 0 {
		add("pool.max_total", "pool.max_total must not be negative, not %d", p.MaxTotal)
	}
	if capacity > 0 && p.members() > 0 && max <= capacity && p.members()+max > capacity {
		add("pool", "the warm pools (%d members) and sandbox.max (%d) do not fit network.pool (%d addresses): lower a size or pool.max_total",
			p.members(), max, capacity)
	}
}

// warmConfig is the runner's view of [pool].
func (p PoolConfig) warmConfig() runner.WarmConfig {
	w := runner.WarmConfig{MaxAge: p.MaxAge.Duration, MaxTotal: p.MaxTotal, Refill: p.Refill.Duration}
	add := func(m map[string]int, tmpl bool) {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if m[n] == 0 {
				continue
			}
			s := runner.WarmSpec{Image: n, Size: m[n]}
			if tmpl {
				s = runner.WarmSpec{Template: n, Size: m[n]}
			}
			w.Pools = append(w.Pools, s)
		}
	}
	add(p.Images, false)
	add(p.Templates, true)
	return w
}

// startWarm starts the warm pools after reconcile (which removed the
// unclaimed members a previous appliance left and adopted claimed ones).
func (a *Appliance) startWarm(context.Context) error {
	w := a.cfg.Pool.warmConfig()
	if err := a.runner.StartWarm(w); err != nil {
		if errors.Is(err, runner.ErrUnsupported) {
			return fmt.Errorf("[pool]: %w", err)
		}
		return err
	}
	a.metrics.warmPool(a.runner.WarmStats)
	return nil
}

// warmPool registers the warm pool metrics, read at scrape time.
func (m *Metrics) warmPool(stats func() runner.WarmStats) {
	counter := func(name, help string, f func(runner.WarmStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "airlock", Subsystem: "pool", Name: name, Help: help},
			func() float64 { return float64(f(stats())) })
	}
	m.reg.MustRegister(
		counter("hits_total", "Creates served by claiming a warm member.", func(s runner.WarmStats) uint64 { return s.Hits }),
		counter("misses_total", "Creates the warm pools could not serve (no match, or empty).", func(s runner.WarmStats) uint64 { return s.Misses }),
		counter("recycled_total", "Warm members removed unclaimed (max age, changed spec).", func(s runner.WarmStats) uint64 { return s.Recycled }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "airlock", Subsystem: "pool", Name: "ready",
			Help: "Warm members ready to be claimed, in all pools."}, func() float64 {
			n := 0
			for _, v := range stats().Ready {
				n += v
			}
			return float64(n)
		}))
}

// blockPause is the runner's BlockNetwork: the kernel path's pause bit of
// the sandbox's block (independent of a lockdown's bit).
func (a *Appliance) blockPause(id string, on bool) error {
	a.mu.Lock()
	h, ok := a.handles[id]
	a.mu.Unlock()
	if !ok {
		return fmt.Errorf("sandbox %s has no kernel path attachment", id)
	}
	return a.path.BlockSandbox(h.Sandbox.Num, bpf.BlockPause, on)
}
