package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
)

// A request body the proxy could not search before forwarding (one
// without a length, or over maxScanBody) is searched as it streams: the
// watchedBody stops at the first placeholder that may not be in it,
// before any byte of it leaves, and the request is refused (RoundTrip).
// It holds back only a piece's tail that could start a placeholder, so a
// stream that waits for its answer is not held.

// errPlaceholderInBody ends a watched body that carried a placeholder.
var errPlaceholderInBody = errors.New("a secret placeholder in the request body")

// watchedBody is a request body searched for placeholders as it streams.
type watchedBody struct {
	rc      io.ReadCloser
	pats    []secretPattern
	ix      patIndex
	reasons map[string]string // by secret name: why it may not be here
	log     func(name string) // logs a find made after RoundTrip returned
	buf     []byte
	win     []byte // the held-back tail and the next piece
	out     []byte // what may be released of win
	carry   []byte
	err     error

	mu       sync.Mutex
	found    string // the placeholder's secret, once one was seen
	returned bool   // RoundTrip returned: a later find is logged here
}

func newWatchedBody(rc io.ReadCloser, pats []secretPattern, reasons map[string]string, log func(string)) *watchedBody {
	return &watchedBody{rc: rc, pats: pats, ix: newPatIndex(pats), reasons: reasons, log: log, buf: make([]byte, 32<<10)}
}

func (b *watchedBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 && b.err == nil {
		b.fill()
	}
	if len(b.out) > 0 {
		n := copy(p, b.out)
		b.out = b.out[n:]
		return n, nil
	}
	return 0, b.err
}

// fill reads one piece and releases what cannot hold a placeholder.
func (b *watchedBody) fill() {
	n, err := b.rc.Read(b.buf)
	b.win = append(append(b.win[:0], b.carry...), b.buf[:n]...)
	b.ix.reset()
	if _, k := b.ix.next(b.pats, b.win, 0); k >= 0 {
		b.err = errPlaceholderInBody
		b.seen(b.pats[k].name)
		return
	}
	keep := 0
	if err == nil {
		keep = b.prefixTail(b.win)
	}
	end := len(b.win) - keep
	b.out = b.win[:end]
	b.carry = append(b.carry[:0], b.win[end:]...)
	b.err = err
}

// prefixTail is the length of w's longest tail that a pattern starts with.
func (b *watchedBody) prefixTail(w []byte) int {
	best := 0
	for _, p := range b.pats {
		for k := min(len(w), len(p.find)-1); k > best; k-- {
			if bytes.HasPrefix(p.find, w[len(w)-k:]) {
				best = k
				break
			}
		}
	}
	return best
}

func (b *watchedBody) seen(name string) {
	b.mu.Lock()
	b.found = name
	late := b.returned
	b.mu.Unlock()
	if late && b.log != nil {
		b.log(name)
	}
}

// result marks RoundTrip as returned and reports the placeholder's secret
// and why it may not be in the body ("" when none was seen so far).
func (b *watchedBody) result() (string, string) {
	if b == nil {
		return "", ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.returned = true
	return b.found, b.reasons[b.found]
}

func (b *watchedBody) Close() error { return b.rc.Close() }

// watchBody searches out's body for the placeholders in pats as it
// streams; reasons says, by secret name, why each may not be there.
func (p *Proxy) watchBody(ev *reqEvent, out *http.Request, pats []secretPattern, reasons map[string]string) {
	if len(pats) == 0 || out.Body == nil || out.Body == http.NoBody {
		return
	}
	id, sandbox, host := ev.e.ID, ev.e.Sandbox, ev.e.HTTP.Host
	ev.watch = newWatchedBody(out.Body, pats, reasons, func(name string) {
		// The upstream answered before the body reached the
		// placeholder: the rest of the body is not sent.
		p.log.Warn("proxy: secret egress blocked", "id", id, "sandbox", sandbox, "secret", name, "host", host,
			"reason", reasons[name]+" (found after the upstream answered; the body was cut off there)")
	})
	out.Body = ev.watch
}
