package audit

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"
)

// batch is one set of chained lines on its way to every sink. The sinks
// write it concurrently; the last one to finish accounts for it.
type batch struct {
	lines  []line
	events int          // how many lines are accepted producer records (the rest are gap records)
	left   atomic.Int32 // sinks still writing it
	lost   atomic.Bool  // a sink gave up on it (closing with a failing sink)
}

// sinkLoop is one sink's writer: it writes batches in order, retrying a
// failed batch with backoff until it succeeds or the pipeline closes.
type sinkLoop struct {
	name    string
	in      chan *batch
	write   func(lines []line) (int, error) // whole lines written, error
	errs    *atomic.Uint64
	failing atomic.Bool
	tick    <-chan time.Time // retention, store only
	// linger is how long a sink waits after a batch for more to join it
	// in one write (the store's group commit); kick ends the wait (Flush).
	linger  time.Duration
	kick    chan struct{}
	pending []*batch // reused by gather
	lines   []line   // reused to join gathered batches
}

// sinkDepth bounds the batches waiting for a sink; beyond it the writer
// waits, the queue fills, and producers drop (counted). A sink takes all
// that wait at once (gather).
const sinkDepth = 8

// run is the writer: it takes batches off the queue, places them in the
// chain, and hands them to the sinks, which write concurrently.
func (p *Pipeline) run() {
	var wg sync.WaitGroup
	for _, s := range p.sinks {
		wg.Add(1)
		go func() { defer wg.Done(); p.sinkRun(s) }()
	}
	defer func() {
		for _, s := range p.sinks {
			close(s.in)
		}
		wg.Wait()
		p.finishErrq()
		close(p.done)
	}()
	recs := make([]*record, 0, p.cfg.BatchSize)
	for {
		select {
		case r := <-p.q:
			recs = append(recs, r)
		case r := <-p.errq:
			recs = append(recs, r)
		case <-p.stop:
			p.finish(recs)
			return
		}
		recs = p.fill(recs)
		full := len(recs) >= p.cfg.BatchSize
		p.dispatch(recs, p.takeGap())
		clear(recs)
		recs = recs[:0]
		if !full && p.cfg.WriterLinger > 0 {
			p.linger()
		}
	}
}

// linger waits WriterLinger (or until Flush or Close) before the writer
// takes the next batch: events emitted meanwhile wait in the queue, and
// their producers wake no one.
func (p *Pipeline) linger() {
	t := time.NewTimer(p.cfg.WriterLinger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.kick:
	case <-p.stop:
	}
}

// fill takes the audit_error records waiting, then whatever else is
// queued, up to a batch.
func (p *Pipeline) fill(recs []*record) []*record {
	return take(p.q, take(p.errq, recs, p.cfg.BatchSize), p.cfg.BatchSize)
}

// finish hands over what is left at Close.
func (p *Pipeline) finish(recs []*record) {
	for {
		recs = p.fill(recs)
		if len(recs) == 0 {
			if g := p.takeGap(); g != nil {
				p.dispatch(nil, g)
			}
			return
		}
		p.dispatch(recs, p.takeGap())
		recs = recs[:0]
	}
}

func (p *Pipeline) dispatch(recs []*record, gap *record) {
	lines, gaps := p.place(recs, gap)
	if len(lines) == 0 {
		return
	}
	b := &batch{lines: lines, events: len(lines) - gaps}
	b.left.Store(int32(len(p.sinks)))
	for _, s := range p.sinks {
		s.in <- b
	}
}

// place gives the records (after an optional gap record) their seq and
// hash. It returns the lines and how many of them are gap records.
func (p *Pipeline) place(recs []*record, gap *record) ([]line, int) {
	lines := make([]line, 0, len(recs)+1)
	p.seqMu.Lock()
	defer p.seqMu.Unlock()
	gaps := 0
	if gap != nil {
		if l, err := p.seq.next(gap); err == nil {
			lines, gaps = append(lines, l), 1
		}
	}
	for _, r := range recs {
		l, err := p.seq.next(r)
		if err != nil {
			p.finished.Add(1)
			var raw []byte
			if r.end != nil {
				raw, _ = json.Marshal(r.end)
			}
			p.reject(rejection{sink: "pipeline", kind: r.kind, sandbox: r.sandbox, reason: ReasonEncode, err: err, record: raw})
			continue
		}
		lines = append(lines, l)
	}
	return lines, gaps
}

func (p *Pipeline) sinkRun(s *sinkLoop) {
	for {
		select {
		case b, ok := <-s.in:
			if !ok {
				return
			}
			p.writeBatches(s, s.gather(b))
		case <-s.tick:
			if !s.failing.Load() {
				p.prune()
			}
		}
	}
}

// maxCoalesce bounds the lines a sink writes at once.
const maxCoalesce = 16384

// gather returns b and the batches already waiting behind it (up to
// maxCoalesce lines): a sink that fell behind catches up in one big
// transaction or write instead of many small ones. A sink with a linger
// (the store) also waits that long for batches still to come, so the few
// events of each command or request share one transaction instead of
// paying a commit each; Flush, Close and a full batch end the wait.
func (s *sinkLoop) gather(b *batch) []*batch {
	bs, n := append(s.pending[:0], b), len(b.lines)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for n < maxCoalesce {
		select {
		case b, ok := <-s.in:
			if !ok {
				return bs
			}
			bs, n = append(bs, b), n+len(b.lines)
			continue
		default:
		}
		if s.linger <= 0 {
			return bs
		}
		if timer == nil {
			timer = time.NewTimer(s.linger)
		}
		select {
		case b, ok := <-s.in:
			if !ok {
				return bs
			}
			bs, n = append(bs, b), n+len(b.lines)
		case <-timer.C:
			return bs
		case <-s.kick:
			return bs
		}
	}
	return bs
}

// writeBatches writes bs to one sink, retrying with backoff until it is
// written. Producers are not blocked meanwhile beyond EnqueueWait: the
// queue fills and they drop (counted, and reported by a gap record).
func (p *Pipeline) writeBatches(s *sinkLoop, bs []*batch) {
	lines := bs[0].lines
	if len(bs) > 1 {
		lines = s.lines[:0]
		for _, b := range bs {
			lines = append(lines, b.lines...)
		}
		s.lines = lines
	}
	defer func() {
		clear(s.lines)
		s.lines = s.lines[:0]
		clear(bs)
		s.pending = bs[:0]
	}()
	done, wait, refused := 0, p.cfg.RetryMin, 0
	for attempt := 1; ; attempt++ {
		var err error
		if done < len(lines) {
			var n int
			n, err = s.write(lines[done:])
			done += n
		}
		if err == nil && done == len(lines) {
			if s.failing.Swap(false) {
				p.log.Warn("audit: writes resumed", "sink", s.name, "first_seq", lines[0].seq)
			}
			for _, b := range bs {
				p.batchDone(b)
			}
			return
		}
		s.errs.Add(1)
		s.failing.Store(true)
		permanent, reason := classifyWriteErr(err)
		if permanent {
			if refused++; refused >= p.cfg.GiveUpAfter || p.stopping() {
				// The same batch failed the same way GiveUpAfter times (or
				// the pipeline is closing, and would lose it whole): write
				// its records apart and give up on those refused.
				n, ierr := p.isolate(s, lines[done:], refused, err)
				done += n
				if ierr == nil {
					continue
				}
				refused, err = 0, ierr
				permanent, reason = classifyWriteErr(err)
			}
		}
		if !permanent {
			p.transient.Add(1)
		}
		p.report(s.name, err, reason, permanent, attempt, len(lines)-done)
		if !p.sleep(wait) {
			if permanent {
				// Closing: write the batch apart rather than lose it whole.
				n, ierr := p.isolate(s, lines[done:], refused, err)
				if done += n; ierr == nil {
					continue
				}
			}
			p.log.Error("audit: closing with a failing sink: records lost", "sink", s.name,
				"records", len(lines)-done, "first_seq", lines[done].seq, "last_seq", lines[len(lines)-1].seq)
			for _, b := range bs {
				b.lost.Store(true)
				p.batchDone(b)
			}
			return
		}
		wait = min(wait*2, p.cfg.RetryMax)
	}
}

// isolate writes lines, which a sink refused for good as a whole, in
// halves (recursively), so the records it takes are written, in order,
// and each one it refuses alone for good is given up on (reject). It
// returns how many lines were written or given up on, and the transient
// error that stopped it, if one did (the caller retries the rest).
func (p *Pipeline) isolate(s *sinkLoop, lines []line, attempts int, cause error) (int, error) {
	switch len(lines) {
	case 0:
		return 0, nil
	case 1:
		l := &lines[0]
		rec := l.raw
		if s.name == "stream" {
			rec = l.out() // what the stream would have written (an OCSF line)
		}
		_, reason := classifyWriteErr(cause)
		p.reject(rejection{sink: s.name, seq: l.seq, kind: l.rec.kind, sandbox: l.rec.sandbox, reason: reason, err: cause,
			attempts: attempts, record: rec})
		return 1, nil
	}
	done := 0
	for _, half := range [][]line{lines[:len(lines)/2], lines[len(lines)/2:]} {
		n, err := s.write(half)
		done += n
		if err == nil && n == len(half) {
			continue
		}
		s.errs.Add(1)
		if permanent, _ := classifyWriteErr(err); !permanent {
			return done, err
		}
		m, err := p.isolate(s, half[n:], attempts+1, err)
		done += m
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// batchDone accounts for b once every sink is through with it.
func (p *Pipeline) batchDone(b *batch) {
	if b.left.Add(-1) > 0 {
		return
	}
	if b.lost.Load() {
		p.lost.Add(uint64(len(b.lines)))
	} else {
		p.written.Add(uint64(len(b.lines)))
		p.gaps.Add(uint64(len(b.lines) - b.events))
	}
	p.lastSeq.Store(b.lines[len(b.lines)-1].seq)
	p.finished.Add(uint64(b.events))
}

// failing reports whether any sink is failing now.
func (p *Pipeline) failing() bool {
	for _, s := range p.sinks {
		if s.failing.Load() {
			return true
		}
	}
	return false
}

// report logs a write failure: the first of an episode at once, then at
// most one line per sink every failureLogEvery, with the counts.
// permanent says the error is one the same records will always meet
// (classifyWriteErr): the batch is tried GiveUpAfter times, then written apart.
func (p *Pipeline) report(sink string, err error, reason string, permanent bool, attempt, pending int) {
	if !p.rateOK(sink, attempt == 1) {
		return
	}
	st := p.Stats()
	what := "audit: " + sink + " write failed (transient: " + reason + "); retrying"
	if permanent {
		what = "audit: " + sink + " refused a batch (" + reason + "); retrying, then writing its records apart and giving up on those refused"
	}
	p.log.Error(what, "err", err, "attempt", attempt, "pending", pending, "dropped_total", st.Dropped,
		"store_errors", st.StoreErrors, "stream_errors", st.StreamErrors, "transient_total", st.Transient)
}

// rateOK reports whether a line about key may be logged now: when first
// is set, else at most once every failureLogEvery.
func (p *Pipeline) rateOK(key string, first bool) bool {
	now := time.Now()
	p.reportMu.Lock()
	defer p.reportMu.Unlock()
	if !first && now.Sub(p.lastReport[key]) < failureLogEvery {
		return false
	}
	p.lastReport[key] = now
	return true
}

// take appends the records waiting in ch to recs, up to limit.
func take(ch chan *record, recs []*record, limit int) []*record {
	for len(recs) < limit {
		select {
		case r := <-ch:
			recs = append(recs, r)
		default:
			return recs
		}
	}
	return recs
}

// finishErrq writes the audit_error records still waiting when the
// sinks stopped (a record was given up on while the pipeline closed),
// trying each sink once; what fails is counted lost and logged.
func (p *Pipeline) finishErrq() {
	lines, _ := p.place(take(p.errq, nil, errQueue), nil)
	if len(lines) == 0 {
		return
	}
	b := &batch{lines: lines, events: len(lines)}
	b.left.Store(int32(len(p.sinks)))
	for _, s := range p.sinks {
		if n, err := s.write(lines); err != nil || n < len(lines) {
			p.log.Error("audit: closing: audit_error records not written (the dead-letter file and the log have what they are about)",
				"sink", s.name, "err", err, "first_seq", lines[0].seq, "last_seq", lines[len(lines)-1].seq)
			b.lost.Store(true)
		}
		p.batchDone(b)
	}
}

const failureLogEvery = 10 * time.Second

// stopping reports whether the pipeline is closing.
func (p *Pipeline) stopping() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// sleep waits d; false means give up (the pipeline is closing).
func (p *Pipeline) sleep(d time.Duration) bool {
	if p.stopping() {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.stop:
		return false
	}
}

// prune applies retention; failures are logged and counted, never fatal.
func (p *Pipeline) prune() {
	r := p.cfg.Retention
	if p.store == nil || (r.MaxAge <= 0 && r.MaxBytes <= 0) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := p.store.Prune(ctx, r, time.Now())
	p.pruned.Add(uint64(n))
	if err != nil {
		p.storeErrs.Add(1)
		p.log.Error("audit: retention failed", "err", err, "deleted", n)
		return
	}
	if n > 0 {
		p.log.Info("audit: retention deleted old records", "deleted", n)
	}
}

// storeWrite and streamWrite adapt the sinks to sinkLoop.write.
func (p *Pipeline) storeWrite(lines []line) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.store.insert(ctx, lines); err != nil {
		return 0, err
	}
	return len(lines), nil
}

func (p *Pipeline) newSinks() {
	if p.store != nil {
		t := time.NewTicker(p.cfg.RetentionEvery)
		p.tickers = append(p.tickers, t)
		p.sinks = append(p.sinks, &sinkLoop{name: "store", in: make(chan *batch, sinkDepth),
			write: p.storeWrite, errs: &p.storeErrs, tick: t.C,
			linger: p.cfg.StoreLinger, kick: make(chan struct{}, 1)})
	}
	if p.out != nil {
		p.sinks = append(p.sinks, &sinkLoop{name: "stream", in: make(chan *batch, sinkDepth),
			write: p.out.write, errs: &p.streamErrs})
	}
}

// checkpointEvery is how long after a write the store's WAL is copied
// into the database, off the writer's goroutine.
const checkpointEvery = 100 * time.Millisecond

// checkpoints runs the store's checkpoints until the pipeline stops: one
// checkpointEvery after the store was written (an idle appliance is not
// woken). A failure (disk full) is logged like a write failure; the
// writer's own failures are what count.
func (p *Pipeline) checkpoints() {
	defer close(p.ckDone)
	if p.store == nil {
		return
	}
	t := time.NewTimer(checkpointEvery)
	t.Stop()
	defer t.Stop()
	for attempt := 1; ; {
		select {
		case <-p.stop:
			return
		case <-p.store.written:
		}
		t.Reset(checkpointEvery)
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := p.store.Checkpoint(ctx)
		cancel()
		if err == nil {
			attempt = 1
			continue
		}
		_, reason := classifyWriteErr(err)
		p.report("checkpoint", err, reason, false, attempt, 0)
		attempt++
	}
}
