package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Pipeline. At least one of the store and the stream
// must be set.
type Config struct {
	// StateDir holds the store (StateDir/audit.db). Empty: no store.
	StateDir string
	// StreamPath is a JSONL file rotated by size. StreamWriter (e.g.
	// os.Stdout) is used instead when set. Both empty: no stream.
	StreamPath     string
	StreamWriter   io.Writer
	StreamMaxBytes int64 // rotate when a file would exceed this (default 100 MiB)
	StreamMaxFiles int   // rotated files kept: path.1 ... path.N (default 10)
	// StreamFormat is the stream's flavor: FormatAirlock (default) or
	// FormatOCSF. The store keeps Airlock records either way.
	StreamFormat Format
	// Node names the appliance in every record (Event.Node; empty: the
	// producer's, if any; serve sets audit.node). ProductVersion is Airlock's version, for OCSF metadata.
	Node           string
	ProductVersion string

	QueueSize   int           // records waiting to be written (default 65536)
	EnqueueWait time.Duration // how long Emit waits on a full queue before dropping (default 50ms)
	BatchSize   int           // records per store transaction (default 4096)
	// WriterLinger is how long the writer lets events gather in the queue
	// after handing a batch to the sinks (default 2ms, negative: none):
	// a producer's Emit then wakes no goroutine, where each event cost a
	// wake-up of the writer and of every sink. Flush and Close end it.
	WriterLinger time.Duration
	// StoreLinger is how long the store waits after an event for others to
	// share its transaction (group commit; default 10ms, negative: none).
	// Flush and Close do not wait for it.
	StoreLinger time.Duration

	Retention      Retention     // store bounds, applied while running
	RetentionEvery time.Duration // how often (default 1m)

	RetryMin time.Duration // first wait after a failed write (default 100ms)
	RetryMax time.Duration // longest wait between retries (default 5s)
	// GiveUpAfter is how many times a batch that a sink refuses for good
	// (a constraint, a record too big: classifyWriteErr) is tried before its
	// records are written apart and the refused ones given up on, to the
	// dead-letter file (default 3). Transient failures are retried until
	// they clear.
	GiveUpAfter int
	// DeadLetterPath is the dead-letter file (default
	// StateDir/audit-deadletter.jsonl, else audit-deadletter.jsonl beside
	// StreamPath); DeadLetterMaxBytes rotates it to DeadLetterPath.1
	// (default 16 MiB).
	DeadLetterPath     string
	DeadLetterMaxBytes int64

	Logger *slog.Logger // default: slog.Default()
}

func (c *Config) defaults() {
	setDefault(&c.StreamMaxBytes, 100<<20)
	setDefault(&c.StreamMaxFiles, 10)
	setDefault(&c.QueueSize, 1<<16)
	setDefault(&c.EnqueueWait, 50*time.Millisecond)
	setDefault(&c.BatchSize, 4096)
	if c.WriterLinger == 0 {
		c.WriterLinger = DefaultWriterLinger
	}
	if c.StoreLinger == 0 {
		c.StoreLinger = DefaultStoreLinger
	}
	setDefault(&c.RetentionEvery, time.Minute)
	setDefault(&c.RetryMin, 100*time.Millisecond)
	setDefault(&c.RetryMax, 5*time.Second)
	setDefault(&c.GiveUpAfter, 3)
	setDefault(&c.DeadLetterMaxBytes, 16<<20)
	if c.DeadLetterPath == "" {
		switch {
		case c.StateDir != "":
			c.DeadLetterPath = filepath.Join(c.StateDir, DeadLetterFile)
		case c.StreamPath != "":
			c.DeadLetterPath = filepath.Join(filepath.Dir(c.StreamPath), DeadLetterFile)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// DefaultWriterLinger is the writer's wait between batches
// (Config.WriterLinger).
const DefaultWriterLinger = 2 * time.Millisecond

// DefaultStoreLinger is the store's group-commit wait (Config.StoreLinger):
// at a few thousand events a second it turns a commit per event into one
// per 10ms, and a query never sees it (Flush ends the wait).
const DefaultStoreLinger = 10 * time.Millisecond

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Stats are the pipeline's counters, for metrics.
type Stats struct {
	QueueDepth    int    // records waiting now
	QueueCapacity int    // the bound
	Accepted      uint64 // records Emit queued
	Dropped       uint64 // records Emit dropped (queue full past EnqueueWait, closed); an event not encodable is Rejected
	Written       uint64 // records written to every sink (a record one sink gave up on is also counted in Rejected)
	Lost          uint64 // records sequenced but not written when Close gave up on a failing sink
	Gaps          uint64 // gap records written
	StoreErrors   uint64 // failed store transactions (retried, or their refused records given up on)
	StreamErrors  uint64 // failed stream writes (retried, or their refused records given up on)
	Transient     uint64 // failed writes classed transient (busy, locked, disk full, I/O), retried with backoff
	// Rejected counts the records given up on, by sink and reason: each
	// is in the dead-letter file and named by an audit_error record.
	Rejected []Rejected
	// DeadLetterErrors counts the records given up on that the dead-letter
	// file could not take (full and not rotated, or a failed write): each
	// is only in the log and named by its audit_error record.
	DeadLetterErrors uint64
	Pruned           uint64 // records retention deleted
	LastSeq          uint64 // the newest record's sequence number
	Failing          bool   // a sink is failing now; writes are being retried
}

// Pipeline takes events from producers through a bounded queue and writes
// them, in batches, to the store and the JSONL stream, chained by hash. It
// implements Emitter. The writer starts in NewPipeline; Close stops it.
type Pipeline struct {
	cfg   Config
	log   *slog.Logger
	q     chan *record
	enc   encoder
	store *Store
	out   sink

	seqMu sync.Mutex
	seq   *sequencer

	emitMu  sync.RWMutex // Emit holds it shared while sending; Close exclusively
	closing chan struct{}
	stop    chan struct{}
	kick    chan struct{} // ends the writer's linger (Flush)
	done    chan struct{}
	ckDone  chan struct{} // the checkpointer stopped
	once    sync.Once

	gapMu             sync.Mutex
	gapN              uint64
	gapFrom, gapTo    time.Time
	accepted, dropped atomic.Uint64
	written, lost     atomic.Uint64
	gaps, pruned      atomic.Uint64
	storeErrs         atomic.Uint64
	streamErrs        atomic.Uint64
	lastSeq           atomic.Uint64
	finished          atomic.Uint64 // accepted records written or lost
	sinks             []*sinkLoop
	tickers           []*time.Ticker
	reportMu          sync.Mutex
	lastReport        map[string]time.Time

	transient atomic.Uint64
	dead      deadLetter
	deadErrs  atomic.Uint64 // records given up on that the dead-letter file could not take
	errq      chan *record  // audit_error records, placed with the next batch
	rejMu     sync.Mutex
	rejected  map[[2]string]uint64 // by sink and reason
}

var _ Emitter = (*Pipeline)(nil)

// NewPipeline opens the store and the stream, continues the hash chain
// where the previous run stopped, and starts the writer.
func NewPipeline(cfg Config) (*Pipeline, error) {
	cfg.defaults()
	if cfg.StateDir == "" && cfg.StreamPath == "" && cfg.StreamWriter == nil {
		return nil, errors.New("audit: pipeline needs a state directory or a stream")
	}
	format, err := ParseFormat(string(cfg.StreamFormat))
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	p := &Pipeline{cfg: cfg, log: cfg.Logger, q: make(chan *record, cfg.QueueSize), seq: newSequencer(),
		closing: make(chan struct{}), stop: make(chan struct{}), kick: make(chan struct{}, 1), done: make(chan struct{}), ckDone: make(chan struct{}),
		lastReport: map[string]time.Time{}, errq: make(chan *record, errQueue), rejected: map[[2]string]uint64{},
		dead: deadLetter{path: cfg.DeadLetterPath, maxBytes: cfg.DeadLetterMaxBytes}}
	p.enc = encoder{node: cfg.Node, ocsf: format == FormatOCSF, version: cfg.ProductVersion}
	if err := p.open(); err != nil {
		p.closeSinks()
		return nil, err
	}
	p.newSinks()
	go p.run()
	go p.checkpoints()
	return p, nil
}

func (p *Pipeline) open() error {
	var lastStore, lastStream []byte
	if p.cfg.StateDir != "" {
		st, err := OpenStore(filepath.Join(p.cfg.StateDir, StoreFile))
		if err != nil {
			return err
		}
		p.store = st
		if lastStore, err = st.last(context.Background()); err != nil {
			return err
		}
	}
	switch {
	case p.cfg.StreamWriter != nil:
		p.out = &writerSink{w: p.cfg.StreamWriter}
	case p.cfg.StreamPath != "":
		fs, last, err := openFileSink(p.cfg.StreamPath, p.cfg.StreamMaxBytes, p.cfg.StreamMaxFiles)
		if err != nil {
			return err
		}
		p.out, lastStream = fs, last
	}
	last := lastStore
	if seqOf(lastStream) > seqOf(lastStore) {
		last = lastStream
	}
	if last != nil {
		if err := p.seq.resume(last); err != nil {
			return err
		}
		p.lastSeq.Store(p.seq.seq)
	}
	return nil
}

func seqOf(raw []byte) uint64 {
	if raw == nil {
		return 0
	}
	s := newSequencer()
	if s.resume(raw) != nil {
		return 0
	}
	return s.seq
}

// Emit queues e. When the queue is full it waits up to EnqueueWait, then
// drops e, counts it, and a gap record reports the loss; while a sink is
// failing (disk full) it drops at once. It never blocks longer.
func (p *Pipeline) Emit(e Event) {
	r, err := p.enc.encode(e)
	if err != nil {
		p.rejectEvent(e, err)
		return
	}
	p.emitMu.RLock()
	defer p.emitMu.RUnlock()
	select {
	case <-p.closing:
		p.drop()
		return
	case p.q <- r:
		p.accepted.Add(1)
		return
	default:
	}
	if p.failing() {
		// A sink is failing (disk full): waiting would only slow the
		// producer down; the loss is counted and reported by a gap record.
		p.drop()
		return
	}
	t := time.NewTimer(p.cfg.EnqueueWait)
	defer t.Stop()
	select {
	case p.q <- r:
		p.accepted.Add(1)
	case <-t.C:
		p.drop()
	case <-p.closing:
		p.drop()
	}
}

func (p *Pipeline) drop() {
	p.dropped.Add(1)
	now := time.Now().UTC()
	p.gapMu.Lock()
	if p.gapN == 0 {
		p.gapFrom = now
	}
	p.gapN++
	p.gapTo = now
	p.gapMu.Unlock()
}

// takeGap returns a gap record for the drops since the last one, or nil.
func (p *Pipeline) takeGap() *record {
	p.gapMu.Lock()
	n, from, to := p.gapN, p.gapFrom, p.gapTo
	p.gapN = 0
	p.gapMu.Unlock()
	if n == 0 {
		return nil
	}
	p.log.Error("audit: events dropped: the writer fell behind", "dropped", n, "from", from, "to", to)
	e := New(KindGap, "")
	e.Reason = "queue full: the store or stream fell behind"
	e.Gap = &Gap{Dropped: n, From: from, To: to}
	r, _ := p.enc.encode(e)
	return r
}

// Stats returns the current counters.
func (p *Pipeline) Stats() Stats {
	return Stats{
		QueueDepth: len(p.q), QueueCapacity: cap(p.q),
		Accepted: p.accepted.Load(), Dropped: p.dropped.Load(), Written: p.written.Load(),
		Lost: p.lost.Load(), Gaps: p.gaps.Load(), StoreErrors: p.storeErrs.Load(),
		StreamErrors: p.streamErrs.Load(), Transient: p.transient.Load(), Rejected: p.rejectedStats(),
		DeadLetterErrors: p.deadErrs.Load(),
		Pruned:           p.pruned.Load(), LastSeq: p.lastSeq.Load(), Failing: p.failing(),
	}
}

// RangeOf returns the records sequenced so far for a running sandbox and
// the hash of its last one. The lifecycle record that ends a sandbox
// (stage destroyed or failed) gets this range filled in automatically.
func (p *Pipeline) RangeOf(sandbox string) (Range, bool) {
	p.seqMu.Lock()
	defer p.seqMu.Unlock()
	return p.seq.rangeOf(sandbox)
}

// ReopenStream makes the stream file be reopened at its path before the
// next write, for a log rotator that renamed it (logrotate without
// copytruncate). It reports whether the stream is a file.
func (p *Pipeline) ReopenStream() bool {
	fs, ok := p.out.(*fileSink)
	if ok {
		fs.reopen.Store(true)
	}
	return ok
}

// Store is the pipeline's store, for queries; nil without a state directory.
func (p *Pipeline) Store() *Store { return p.store }

// Flush waits until every record queued before the call is written (or
// given up on), or ctx ends.
func (p *Pipeline) Flush(ctx context.Context) error {
	want := p.accepted.Load()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for p.finished.Load() < want {
		p.kickSinks()
		select {
		case <-ctx.Done():
			return fmt.Errorf("audit: flush: %w", ctx.Err())
		case <-p.done:
			return nil
		case <-t.C:
		}
	}
	return nil
}

// kickSinks ends the writer's and the sinks' lingers: what they gathered
// is written now.
func (p *Pipeline) kickSinks() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
	for _, s := range p.sinks {
		if s.kick != nil {
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
	}
}

// Close stops accepting events, writes what is queued (giving up on a sink
// that still fails after one more try), and closes the store and stream.
func (p *Pipeline) Close() error {
	p.once.Do(func() {
		close(p.closing)
		p.emitMu.Lock() // no Emit is sending any more
		close(p.stop)
		p.kickSinks()
		p.emitMu.Unlock()
		<-p.done
		<-p.ckDone
		for _, t := range p.tickers {
			t.Stop()
		}
	})
	return p.closeSinks()
}

func (p *Pipeline) closeSinks() error {
	var errs []error
	if p.out != nil {
		errs = append(errs, p.out.close())
		p.out = nil
	}
	if p.store != nil {
		errs = append(errs, p.store.Close())
		p.store = nil
	}
	errs = append(errs, p.dead.close())
	return errors.Join(errs...)
}
