package runner

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// LabelPool marks a warm pool member's container with its pool key.
const LabelPool = "io.airlock.pool"

// Warm pool defaults.
const (
	DefaultWarmMaxAge = 30 * time.Minute
	DefaultWarmRefill = 2 * time.Second
)

// WarmSpec is one warm pool: Size members of a template (NAME or
// NAME:vN; the newest version when no tag) or of a plain Image, with the
// resource limits and root mode a create must ask for to claim one.
type WarmSpec struct {
	Template     string
	Image        string
	Limits       Limits
	ReadOnlyRoot bool
	Size         int
}

// WarmConfig configures the warm pools. Members older than MaxAge are
// recycled (destroyed, then replaced); the refill runs every Refill and
// after each claim, and never makes more than MaxTotal members in all.
type WarmConfig struct {
	Pools    []WarmSpec
	MaxAge   time.Duration // 0: DefaultWarmMaxAge
	MaxTotal int           // 0: the sum of the sizes
	Refill   time.Duration // 0: DefaultWarmRefill
}

// WarmStats is the pools' state and counters since start.
type WarmStats struct {
	Ready    map[string]int `json:"ready"` // pool key -> idle members
	Hits     uint64         `json:"hits"`
	Misses   uint64         `json:"misses"`
	Recycled uint64         `json:"recycled"`
	Failures uint64         `json:"failures"` // members that could not be made
}

// warmPools is the runner's warm pool state (Runner.warm).
type warmPools struct {
	mu    sync.Mutex
	cfg   WarmConfig
	idle  map[string][]*sandbox // key -> members, oldest first
	stats WarmStats
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// warmKey is what a create must match to claim a member: the image (and
// template version) and the limits and root mode baked into the container.
func warmKey(image, tmpl string, l Limits, ro bool) string {
	return fmt.Sprintf("%s|%s|%+v|ro=%t", image, tmpl, l, ro)
}

// StartWarm starts the warm pools. It needs the network hook and the
// in-sandbox agent (a claim binds everything through them, never through
// the engine). Members a previous process left are handled by Reconcile
// (adopted when claimed, removed otherwise), so call Reconcile first.
func (r *Runner) StartWarm(cfg WarmConfig) error {
	if len(cfg.Pools) == 0 {
		return nil
	}
	switch {
	case r.pool == nil:
		return fmt.Errorf("warm pool: sandboxes have no network hook: %w", ErrUnsupported)
	case r.agentDir == "":
		return fmt.Errorf("warm pool: a claim binds a member through the in-sandbox agent, and airlock-init is not installed: %w", ErrUnsupported)
	}
	for i, p := range cfg.Pools {
		if (p.Template == "") == (p.Image == "") || p.Size <= 0 {
			return fmt.Errorf("warm pool %d: give a template or an image (not both) and a size above 0: %w", i, ErrInvalid)
		}
	}
	cfg.MaxAge = cmpOr(cfg.MaxAge, DefaultWarmMaxAge)
	cfg.Refill = cmpOr(cfg.Refill, DefaultWarmRefill)
	if cfg.MaxTotal <= 0 {
		for _, p := range cfg.Pools {
			cfg.MaxTotal += p.Size
		}
	}
	w := &warmPools{cfg: cfg, idle: map[string][]*sandbox{}, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	w.stats.Ready = map[string]int{}
	r.mu.Lock()
	if r.warm != nil || r.closed {
		r.mu.Unlock()
		return fmt.Errorf("warm pool: already started or closed: %w", ErrInvalid)
	}
	r.warm = w
	r.mu.Unlock()
	go r.warmLoop(w)
	return nil
}

// WarmStats returns the pools' state (zero when there are none).
func (r *Runner) WarmStats() WarmStats {
	w := r.warmPools()
	if w == nil {
		return WarmStats{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.Ready = map[string]int{}
	for k, m := range w.idle {
		s.Ready[k] = len(m)
	}
	return s
}

func (r *Runner) warmPools() *warmPools {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.warm
}

func (r *Runner) warmLoop(w *warmPools) {
	defer close(w.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-w.stop; cancel() }()
	t := time.NewTicker(w.cfg.Refill)
	defer t.Stop()
	for {
		r.refill(ctx, w)
		select {
		case <-w.stop:
			return
		case <-t.C:
		case <-w.kick:
		}
	}
}

// stopWarm ends the refill loop and waits for it (Close). Idle members
// stay: the next runner's Reconcile removes them.
func (r *Runner) stopWarm() {
	w := r.warmPools()
	if w == nil {
		return
	}
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// resolved is a pool spec with its template resolved now.
type resolved struct {
	key, image, tmpl string
	spec             WarmSpec
}

func (r *Runner) resolveWarm(p WarmSpec) (resolved, error) {
	img, tmpl := p.Image, ""
	if p.Template != "" {
		t, err := r.Template(p.Template)
		if err != nil {
			return resolved{}, err
		}
		img, tmpl = t.Image, t.Ref
	}
	return resolved{key: warmKey(img, tmpl, p.Limits, p.ReadOnlyRoot), image: img, tmpl: tmpl, spec: p}, nil
}

// refill recycles members that are too old or whose spec changed (a newer
// template version), then makes members until each pool has its size,
// within MaxTotal.
func (r *Runner) refill(ctx context.Context, w *warmPools) {
	want := map[string]resolved{}
	for _, p := range w.cfg.Pools {
		rs, err := r.resolveWarm(p)
		if err != nil {
			r.log.Warn("warm pool: cannot resolve", "template", p.Template, "image", p.Image, "err", err)
			continue
		}
		want[rs.key] = rs
	}
	r.recycle(w, want)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		rs := want[k]
		for w.count(k) < rs.spec.Size && w.total() < w.cfg.MaxTotal {
			if r.isClosed() || w.stopped() {
				return
			}
			if err := r.addMember(ctx, w, rs); err != nil {
				w.mu.Lock()
				w.stats.Failures++
				w.mu.Unlock()
				r.log.Warn("warm pool: make a member", "pool", k, "err", err)
				break // try again at the next refill
			}
		}
	}
}

func (w *warmPools) count(k string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle[k])
}

func (w *warmPools) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.idle {
		n += len(m)
	}
	return n
}

func (w *warmPools) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// take removes and returns the oldest idle member under key that is
// younger than maxAge, or nil (older ones are left for recycle).
func (w *warmPools) take(key string, maxAge time.Duration, now time.Time) *sandbox {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, sb := range w.idle[key] {
		if now.Sub(sb.info.Created) < maxAge {
			w.idle[key] = slices.Delete(slices.Clone(w.idle[key]), i, i+1)
			w.stats.Hits++
			return sb
		}
	}
	w.stats.Misses++
	return nil
}

func (w *warmPools) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// recycle destroys idle members older than MaxAge or of no current spec.
func (r *Runner) recycle(w *warmPools, want map[string]resolved) {
	now := r.cfg.Now()
	var old []*sandbox
	var why []string
	w.mu.Lock()
	for k, ms := range w.idle {
		keep := ms[:0:0]
		for _, sb := range ms {
			switch {
			case want[k].key == "":
				old, why = append(old, sb), append(why, "its pool spec changed or was removed")
			case now.Sub(sb.info.Created) >= w.cfg.MaxAge:
				old, why = append(old, sb), append(why, "older than the pool's max age "+w.cfg.MaxAge.String())
			default:
				keep = append(keep, sb)
			}
		}
		w.idle[k] = keep
	}
	w.stats.Recycled += uint64(len(old))
	w.mu.Unlock()
	for i, sb := range old {
		r.dropMember(sb, "recycled", why[i])
	}
}

// dropMember removes an unclaimed member: nothing ran in it, so there are
// no artifacts to keep.
func (r *Runner) dropMember(sb *sandbox, stage, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.lifecycle(sb.info, stage, "warm pool member removed unclaimed: "+why)
	if err := r.teardown(ctx, sb); err != nil {
		r.log.Warn("warm pool: remove a member", "sandbox", sb.info.ID, "err", err)
		r.setPhase(sb.info.ID, phaseDestroyFailed)
		return
	}
	r.mu.Lock()
	delete(r.sandboxes, sb.info.ID)
	r.mu.Unlock()
}

// matchWarm returns the key a create matches, or "" with why it cannot
// be served from a pool.
func matchWarm(req CreateRequest, tmpl string) (string, string) {
	switch {
	case req.Workspace.Mode == WorkspaceBind && req.Workspace.HostDir != "":
		return "", "a bind-mounted workspace is fixed when the container is made"
	case len(req.CapAdd) > 0:
		return "", "added capabilities are fixed when the container is made"
	case req.Workspace.HostDir != "" && !plainTree(req.Workspace.HostDir):
		return "", "the copied workspace holds a symlink or special file (the engine copies those)"
	}
	return warmKey(req.Image, tmpl, req.Limits, req.ReadOnlyRoot), ""
}

func describeKey(k string) string { return strings.ReplaceAll(k, "|", " ") }

// idleMembers lists the idle warm members now (for Watch).
func (r *Runner) idleMembers() []*sandbox {
	w := r.warmPools()
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*sandbox
	for _, ms := range w.idle {
		out = append(out, ms...)
	}
	return out
}

// checkMembers removes the members (listed before the engine's list) whose
// container is not running, unless a claim took them meanwhile: a dead
// member is never handed out.
func (r *Runner) checkMembers(members []*sandbox, byID map[string]Container) {
	w := r.warmPools()
	for _, sb := range members {
		if c, ok := byID[sb.info.ContainerID]; ok && c.Running {
			continue
		}
		w.mu.Lock()
		k := sb.warmKey
		i := slices.Index(w.idle[k], sb)
		if i >= 0 {
			w.idle[k] = slices.Delete(slices.Clone(w.idle[k]), i, i+1)
			w.stats.Recycled++
		}
		w.mu.Unlock()
		if i >= 0 {
			go r.dropMember(sb, "recycled", "its container stopped outside airlock")
		}
	}
}
