package audit

import (
	"context"
	"time"
)

// run is the single writer: it takes batches off the queue, places them in
// the chain, and writes them to the sinks, retrying while a sink fails.
func (p *Pipeline) run() {
	defer close(p.done)
	batch := make([]*record, 0, p.cfg.BatchSize)
	prune := time.NewTicker(p.cfg.RetentionEvery)
	defer prune.Stop()
	for {
		select {
		case r := <-p.q:
			batch = append(batch, r)
		case <-prune.C:
			p.prune()
			continue
		case <-p.stop:
			p.finish(batch)
			return
		}
		batch = p.fill(batch)
		p.writeBatch(batch)
		clear(batch)
		batch = batch[:0]
	}
}

// fill takes whatever else is queued, up to a batch.
func (p *Pipeline) fill(batch []*record) []*record {
	for len(batch) < p.cfg.BatchSize {
		select {
		case r := <-p.q:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// finish writes what is left at Close.
func (p *Pipeline) finish(batch []*record) {
	for {
		batch = p.fill(batch)
		if len(batch) == 0 {
			if g := p.takeGap(); g != nil {
				lines, _ := p.place(nil, g)
				p.writeLines(lines, 0, true)
			}
			return
		}
		p.writeBatch(batch)
		batch = batch[:0]
	}
}

func (p *Pipeline) writeBatch(batch []*record) {
	lines, gaps := p.place(batch, p.takeGap())
	p.writeLines(lines, len(lines)-gaps, false)
}

// place gives the records (after an optional gap record) their seq and
// hash. It returns the lines and how many of them are gap records.
func (p *Pipeline) place(batch []*record, gap *record) ([]line, int) {
	lines := make([]line, 0, len(batch)+1)
	p.seqMu.Lock()
	defer p.seqMu.Unlock()
	gaps := 0
	if gap != nil {
		if l, err := p.seq.next(gap); err == nil {
			lines, gaps = append(lines, l), 1
		}
	}
	for _, r := range batch {
		l, err := p.seq.next(r)
		if err != nil {
			p.log.Error("audit: record not encodable, dropped", "kind", r.kind, "err", err)
			p.finished.Add(1)
			p.drop()
			continue
		}
		lines = append(lines, l)
	}
	return lines, gaps
}

// writeLines writes to every sink, retrying with backoff until all have
// the lines. Producers are not blocked meanwhile beyond EnqueueWait: the
// queue fills and they drop (counted, and reported by a gap record).
// events is how many of lines are accepted producer records.
func (p *Pipeline) writeLines(lines []line, events int, closing bool) {
	if len(lines) == 0 {
		return
	}
	streamDone, storeDone := 0, p.store == nil
	if p.out == nil {
		streamDone = len(lines)
	}
	wait := p.cfg.RetryMin
	for attempt := 1; ; attempt++ {
		if streamDone < len(lines) {
			n, err := p.out.write(lines[streamDone:])
			streamDone += n
			if err != nil {
				p.streamErrs.Add(1)
				p.report("audit: stream write failed; retrying", err, attempt, len(lines)-streamDone)
			}
		}
		if !storeDone {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := p.store.insert(ctx, lines)
			cancel()
			if err != nil {
				p.storeErrs.Add(1)
				p.report("audit: store write failed; retrying", err, attempt, len(lines))
			}
			storeDone = err == nil
		}
		if storeDone && streamDone == len(lines) {
			p.wrote(lines, events)
			return
		}
		p.failing.Store(true)
		if !p.sleep(wait, closing) {
			p.lost.Add(uint64(len(lines)))
			p.finished.Add(uint64(events))
			p.log.Error("audit: closing with a failing sink: records lost", "records", len(lines),
				"first_seq", lines[0].seq, "last_seq", lines[len(lines)-1].seq)
			return
		}
		wait = min(wait*2, p.cfg.RetryMax)
	}
}

// report logs a write failure: the first of an episode at once, then at
// most one line per sink every failureLogEvery, with the counts.
func (p *Pipeline) report(msg string, err error, attempt, pending int) {
	now := time.Now()
	if attempt > 1 && now.Sub(p.lastReport[msg]) < failureLogEvery {
		return
	}
	p.lastReport[msg] = now
	st := p.Stats()
	p.log.Error(msg, "err", err, "attempt", attempt, "pending", pending,
		"dropped_total", st.Dropped, "store_errors", st.StoreErrors, "stream_errors", st.StreamErrors)
}

const failureLogEvery = 10 * time.Second

func (p *Pipeline) wrote(lines []line, events int) {
	if p.failing.Swap(false) {
		p.log.Warn("audit: writes resumed", "first_seq", lines[0].seq)
	}
	p.written.Add(uint64(len(lines)))
	p.finished.Add(uint64(events))
	if n := len(lines) - events; n > 0 {
		p.gaps.Add(uint64(n))
	}
	p.lastSeq.Store(lines[len(lines)-1].seq)
}

// sleep waits d; false means give up (the pipeline is closing).
func (p *Pipeline) sleep(d time.Duration, closing bool) bool {
	if closing {
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
	if p.store == nil || (r.MaxAge <= 0 && r.MaxBytes <= 0) || p.failing.Load() {
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
