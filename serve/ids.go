package serve

import (
	"context"
	"sync"
	"sync/atomic"
)

// idHandoff lets serve choose a sandbox's id before runner.Create runs, so
// that everything keyed by the id — task secrets, sentinel placeholders —
// is registered before the sandbox's first command (setup) can use the
// proxy. runner.Create draws its id from Config.NewID, a hook with no
// arguments; serve puts one claim at a time in a one-slot channel and the
// hook takes it. runner.Create calls NewID before any engine call, so the
// slot is held only for microseconds; a Create that fails before drawing an
// id gives its claim back (withdraw). The zero value is ready to use.
type idHandoff struct {
	once sync.Once
	slot chan *idClaim
}

type idClaim struct {
	id    string
	taken atomic.Bool
}

func (h *idHandoff) init() { h.once.Do(func() { h.slot = make(chan *idClaim, 1) }) }

// offer puts id in the slot for the next NewID call, waiting while an
// earlier claim is still there.
func (h *idHandoff) offer(ctx context.Context, id string) (*idClaim, error) {
	h.init()
	c := &idClaim{id: id}
	select {
	case h.slot <- c:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// newID is the runner's Config.NewID: the offered id, or a fresh random
// one when nothing was offered (a Create that does not come through serve).
func (h *idHandoff) newID() string {
	h.init()
	select {
	case c := <-h.slot:
		c.taken.Store(true)
		return c.id
	default:
		return randomHex(6)
	}
}

// withdraw takes back a claim no NewID call took. Only the claim's owner
// calls it, after its runner.Create returned; while the claim sits in the
// slot nobody else can offer, so the slot holds exactly that claim.
func (h *idHandoff) withdraw(c *idClaim) {
	if c.taken.Load() {
		return
	}
	select {
	case <-h.slot:
	default:
	}
}
