package upstream

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/miekg/dns"
)

const (
	// Slots is how many sockets each upstream has open at a time.
	Slots = 4
	// MaxUses is how many queries a socket carries before it is replaced.
	MaxUses = 16
	// maxAnswer is the largest answer read; dnsd advertises less upstream,
	// so larger answers come truncated.
	maxAnswer = 4096

	sweepEvery = 10 * time.Millisecond
	// readBatch is how many answers a socket's reader takes per recvmmsg:
	// a few (at most MaxUses are pending, spread out in time), so that the
	// buffers of the sockets open during an upstream outage stay small.
	readBatch = 4
)

var (
	// ErrTimeout is a query's error when its deadline passed unanswered.
	ErrTimeout = errors.New("upstream did not answer in time")
	// ErrSend is a query's error when it could not be sent.
	ErrSend = errors.New("upstream send failed")
)

// NewID returns a random query ID (math/rand/v2: a per-thread ChaCha8
// stream seeded by the kernel, not guessable from outside).
func NewID() uint16 { return uint16(rand.Uint32()) }

// newID is NewID, replaced by tests that need colliding IDs.
var newID = NewID

// Answer is a pending query's W with its matched answer.
type Answer[T comparable] struct {
	W        T
	Msg      *dns.Msg
	Upstream string // the upstream's address, for events
}

// Handler gets back what Register made pending, exactly once per query.
type Handler[T comparable] interface {
	// Answered gets the matched answers of one read on a socket, on that
	// socket's reader goroutine. The batch is only valid during the call.
	Answered(batch []Answer[T])
	// Failed gets a query that ended without an answer: ErrTimeout,
	// ErrSend (wrapped), or net.ErrClosed when the pool closed.
	Failed(w T, upstream string, err error)
}
