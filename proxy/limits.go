package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"airlock/audit"
	"airlock/policies"
)

// limiters holds one token bucket per sandbox and category with a rate.
type limiters struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (l *limiters) get(key string, r policies.Rate) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*rate.Limiter{}
	}
	lim, ok := l.m[key]
	if !ok {
		every := time.Duration(r.Per) / time.Duration(r.N)
		lim = rate.NewLimiter(rate.Every(every), r.N)
		l.m[key] = lim
	}
	return lim
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
		if !p.limiters.get(ev.e.Sandbox+"\x00"+c.Name, c.Rate).Allow() {
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

// ask holds a request (or connection) for a human decision. No approver,
// an error or the hold timing out all mean deny; each step is an event.
func (p *Proxy) ask(ctx context.Context, f *flow, id, dest string, v policies.Verdict) policies.Verdict {
	p.emitApproval(f, id, "held", dest, v)
	approved := false
	stage := "denied"
	if p.cfg.Approver != nil {
		actx, cancel := context.WithTimeout(ctx, p.cfg.AskTimeout)
		ok, err := p.cfg.Approver.Ask(actx, Hold{ID: id, Sandbox: f.sb.ID, Destination: dest, Verdict: v})
		if errors.Is(actx.Err(), context.DeadlineExceeded) {
			stage = "expired"
		}
		cancel()
		approved = err == nil && ok
	}
	if approved {
		p.emitApproval(f, id, "approved", dest, v)
		v.Action = policies.ActionAllow
		return v
	}
	if stage == "denied" && p.cfg.Approver == nil {
		stage = "expired"
	}
	p.emitApproval(f, id, stage, dest, v)
	d := internalDeny(ruleAsk, "the request needs approval and was not approved ("+stage+")")
	d.Category, d.Kind, d.Cat = v.Category, v.Kind, v.Cat
	return d
}

func (p *Proxy) emitApproval(f *flow, id, stage, dest string, v policies.Verdict) {
	e := audit.New(audit.KindApproval, f.sb.ID)
	e.ID = id
	verdictFields(&e, v)
	e.Approval = &audit.Approval{Stage: stage, Destination: dest}
	p.cfg.Emitter.Emit(e)
}
