package audit

import (
	"sync"
	"time"
)

// How an event was linked to the process that made it (Event.Attribution).
const (
	AttrSocket   = "socket"    // its socket was found, and the process holding it
	AttrInferred = "inferred"  // the socket was gone: the only command running then
	AttrExited   = "exited"    // the socket (or its process) was gone before it was asked about
	AttrOtherUID = "other-uid" // held by another uid's process, which the agent cannot read (no pid)
	AttrNoAgent  = "no-agent"  // the sandbox runs no agent (commands through the engine's exec)
	AttrTimeout  = "timeout"   // the agent did not answer in time
	AttrBusy     = "busy"      // too many lookups at once: not asked
	AttrError    = "error"     // the agent could not be asked
)

// Attribution is the process in a sandbox that made a flow, request or
// query. Status is one of the Attr* values.
type Attribution struct {
	ExecID string
	Pid    int
	Comm   string
	Status string
}

// Found tells whether a names a command.
func (a Attribution) Found() bool { return a.ExecID != "" }

// Apply sets e's attribution fields.
func (a Attribution) Apply(e *Event) {
	e.ExecID, e.Pid, e.Comm, e.Attribution = a.ExecID, a.Pid, a.Comm, a.Status
}

// Owner is the answer to one attribution lookup: set once, read any
// number of times, with callbacks run when it is set. The zero value is
// not usable; use NewOwner or Answered.
type Owner struct {
	mu   sync.Mutex
	done chan struct{}
	a    Attribution
	then []func(Attribution)
}

// NewOwner returns an unanswered lookup.
func NewOwner() *Owner { return &Owner{done: make(chan struct{})} }

// Answered returns a lookup answered with a.
func Answered(a Attribution) *Owner {
	o := NewOwner()
	o.Set(a)
	return o
}

// Set answers the lookup; later calls are ignored.
func (o *Owner) Set(a Attribution) {
	o.mu.Lock()
	select {
	case <-o.done:
		o.mu.Unlock()
		return
	default:
	}
	o.a = a
	close(o.done)
	then := o.then
	o.then = nil
	o.mu.Unlock()
	for _, f := range then {
		f(a)
	}
}

// Get returns the answer if there is one yet.
func (o *Owner) Get() (Attribution, bool) {
	select {
	case <-o.done:
		return o.a, true
	default:
		return Attribution{}, false
	}
}

// Then runs f with the answer: at once (on this goroutine) when it is
// known, else on the goroutine that sets it.
func (o *Owner) Then(f func(Attribution)) {
	o.mu.Lock()
	select {
	case <-o.done:
		o.mu.Unlock()
		f(o.a)
		return
	default:
	}
	o.then = append(o.then, f)
	o.mu.Unlock()
}

// Wait waits at most d for the answer; false when there is none yet.
func (o *Owner) Wait(d time.Duration) (Attribution, bool) {
	if a, ok := o.Get(); ok {
		return a, true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-o.done:
		return o.a, true
	case <-t.C:
		return Attribution{}, false
	}
}
