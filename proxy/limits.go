package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"

	"airlock/policies"
)

// maxLimiters bounds the token buckets kept: keys (sandbox and category)
// churn as sandboxes come and go, and no sequence of keys may grow memory
// without bound.
const maxLimiters = 16 << 10

// limiters holds one token bucket per sandbox and category with a rate,
// least recently used first out. A bucket left alone long enough to refill
// completely carries no state (a new one behaves the same), so such idle
// buckets are dropped as new keys arrive; past maxLimiters the least
// recently used one goes even if it is not full.
type limiters struct {
	mu  sync.Mutex
	lru *simplelru.LRU[string, *rate.Limiter]
}

func (l *limiters) get(key string, r policies.Rate, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lru == nil {
		l.lru, _ = simplelru.NewLRU[string, *rate.Limiter](maxLimiters, nil)
	}
	if lim, ok := l.lru.Get(key); ok {
		return lim
	}
	l.dropIdle(now, 2)
	every := time.Duration(r.Per) / time.Duration(r.N)
	lim := rate.NewLimiter(rate.Every(every), r.N)
	lim.SetBurstAt(now, r.N) // full at now, in the caller's clock
	l.lru.Add(key, lim)
	return lim
}

// dropIdle removes up to n of the least recently used buckets that have
// refilled completely: each insert clears a little, so buckets of departed
// sandboxes do not linger until the bound.
func (l *limiters) dropIdle(now time.Time, n int) {
	for range n {
		key, lim, ok := l.lru.GetOldest()
		if !ok || lim.TokensAt(now) < float64(lim.Burst()) {
			return
		}
		l.lru.Remove(key)
	}
}

func (l *limiters) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lru == nil {
		return 0
	}
	return l.lru.Len()
}

// errBodyLimit is returned by a request body over the category's limit.
var errBodyLimit = errors.New("proxy: request body over the category's limit")

// limit applies the category's request rate and body size limit.
func (p *Proxy) limit(ev *reqEvent, req *http.Request, v policies.Verdict) *http.Response {
	c := v.Cat
	if c == nil {
		return nil
	}
	if c.Rate.N > 0 && c.Rate.Per > 0 {
		now := time.Now()
		if !p.limiters.get(ev.e.Sandbox+"\x00"+c.Name, c.Rate, now).AllowN(now, 1) {
			d := internalDeny(ruleRate, "over the category's request rate")
			d.Category = c.Name
			return p.refuse(ev, req, http.StatusTooManyRequests, d)
		}
	}
	if c.MaxBody > 0 {
		if req.ContentLength > c.MaxBody {
			d := internalDeny(ruleBodyLimit, "request body over the category's limit")
			d.Category = c.Name
			return p.refuse(ev, req, http.StatusRequestEntityTooLarge, d)
		}
		if req.ContentLength < 0 && req.Body != nil {
			req.Body = &maxBody{rc: req.Body, left: c.MaxBody}
		}
	}
	return nil
}

// maxBody fails the upload once more than left bytes arrive, so an
// over-limit body is never completely forwarded.
type maxBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *maxBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errBodyLimit
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, errBodyLimit
	}
	return n, err
}

func (b *maxBody) Close() error { return b.rc.Close() }
