package audit

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var ignoreChain = cmpopts.IgnoreFields(Event{}, "Seq", "PrevHash")

// The range fields of the destroyed record are filled in by the pipeline.
var ignoreRange = cmpopts.IgnoreFields(Lifecycle{}, "FirstSeq", "LastSeq", "FinalHash")

func TestRoundTripEveryKind(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StateDir: dir, StreamPath: stream})
	want := sampleEvents()
	kinds := map[Kind]bool{}
	for _, e := range want {
		p.Emit(e)
		kinds[e.Kind] = true
	}
	for _, k := range []Kind{KindDNS, KindFlow, KindHTTP, KindDrop, KindExec, KindLifecycle, KindPolicy, KindApproval, KindGap} {
		if !kinds[k] {
			t.Fatalf("sample has no %s event", k)
		}
	}
	flush(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	fromStream := decodeLines(t, readLines(t, stream))
	if d := cmp.Diff(want, fromStream, ignoreChain, ignoreRange); d != "" {
		t.Errorf("JSONL differs (-emitted +streamed):\n%s", d)
	}
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fromStore, err := st.Query(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(fromStream, fromStore); d != "" {
		t.Errorf("store differs from stream (-stream +store):\n%s", d)
	}
	for k := range kinds {
		got, err := st.Query(context.Background(), Query{Kind: k})
		if err != nil {
			t.Fatal(err)
		}
		var exp []Event
		for _, e := range want {
			if e.Kind == k {
				exp = append(exp, e)
			}
		}
		if d := cmp.Diff(exp, got, ignoreChain, ignoreRange); d != "" {
			t.Errorf("Query{Kind: %s} (-want +got):\n%s", k, d)
		}
	}
	for i, e := range fromStream {
		if e.Seq != uint64(i+1) {
			t.Errorf("record %d has seq %d", i, e.Seq)
		}
	}
	res, err := Verify(stream)
	if err != nil || !res.OK() {
		t.Fatalf("Verify = %+v, %v", res, err)
	}
}

func TestLifecycleEndCarriesRange(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StreamPath: stream})
	other := New(KindDNS, "sb-2")
	other.DNS = &DNS{QName: "a.example.test", QType: "A", RCode: "NOERROR"}
	for _, e := range sampleEvents() {
		p.Emit(e)
		p.Emit(other)
	}
	flush(t, p)
	p.Close()
	lines := readLines(t, stream)
	evs := decodeLines(t, lines)
	end := evs[len(evs)-2] // the destroyed record, then sb-2's last
	lc := end.Lifecycle
	if end.Kind != KindLifecycle || lc.Stage != "destroyed" {
		t.Fatalf("unexpected record %+v", end)
	}
	var first, last uint64
	var lastRaw []byte
	for i, e := range evs {
		if e.Sandbox == "sb-1" && e.Seq != end.Seq {
			if first == 0 {
				first = e.Seq
			}
			last, lastRaw = e.Seq, lines[i]
		}
	}
	if lc.FirstSeq != first || lc.LastSeq != last || lc.FinalHash != HashLine(lastRaw) {
		t.Errorf("range = %d..%d %s, want %d..%d %s", lc.FirstSeq, lc.LastSeq, lc.FinalHash, first, last, HashLine(lastRaw))
	}
	if _, ok := p.RangeOf("sb-1"); ok {
		t.Error("range of an ended sandbox is still tracked")
	}
}

func TestChainResumesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	for round := range 3 {
		p := newTestPipeline(t, Config{StateDir: dir, StreamPath: stream, StreamMaxBytes: 3000, StreamMaxFiles: 50})
		for _, e := range sampleEvents() {
			p.Emit(e)
		}
		flush(t, p)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if got, want := p.Stats().LastSeq, uint64(15*(round+1)); got != want {
			t.Fatalf("round %d: last seq %d, want %d", round, got, want)
		}
	}
	files, _ := filepath.Glob(stream + "*")
	if len(files) < 3 {
		t.Fatalf("expected rotation into several files, got %v", files)
	}
	res, err := Verify(files...)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || res.Records != 45 || res.FirstSeq != 1 || res.LastSeq != 45 {
		t.Fatalf("Verify across %d files: %+v", len(files), res)
	}
}

// blockingWriter blocks every Write until released, then works.
type blockingWriter struct {
	release chan struct{}
	mu      sync.Mutex
	buf     []byte
}

func (w *blockingWriter) Write(b []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	return len(b), nil
}

func TestFullQueueDropsCountsAndWritesGap(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	p := newTestPipeline(t, Config{StreamWriter: w, QueueSize: 8, BatchSize: 4, EnqueueWait: time.Millisecond})
	e := New(KindDNS, "sb-1")
	e.DNS = &DNS{QName: "a.example.test", QType: "A", RCode: "NOERROR"}
	const n = 200
	for range n {
		p.Emit(e) // must return although nothing can be written
	}
	st := p.Stats()
	if st.Dropped == 0 || st.Accepted+st.Dropped != n {
		t.Fatalf("stats after a stalled writer: %+v", st)
	}
	close(w.release)
	flush(t, p)
	p.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	os.WriteFile(path, w.buf, 0o600)
	evs := decodeLines(t, readLines(t, path))
	var dropped uint64
	var dns int
	for _, e := range evs {
		switch e.Kind {
		case KindGap:
			dropped += e.Gap.Dropped
			if e.Gap.From.IsZero() || e.Gap.To.Before(e.Gap.From) {
				t.Errorf("gap times: %+v", e.Gap)
			}
		case KindDNS:
			dns++
		}
	}
	if dropped != st.Dropped || uint64(dns) != st.Accepted {
		t.Errorf("gap records count %d dropped, %d dns written; stats %+v", dropped, dns, st)
	}
	if res, _ := Verify(path); !res.OK() {
		t.Errorf("chain broken: %v", res.Problems)
	}
}

// flakyWriter fails its first failures writes (writing half of the data,
// as a full disk can), then works.
type flakyWriter struct {
	failures atomic.Int32
	buf      []byte
}

func (w *flakyWriter) Write(b []byte) (int, error) {
	if w.failures.Add(-1) >= 0 {
		n := len(b) / 2
		w.buf = append(w.buf, b[:n]...)
		return n, errors.New("no space left on device")
	}
	w.buf = append(w.buf, b...)
	return len(b), nil
}

func TestWriteFailureRetriesAndResumes(t *testing.T) {
	w := &flakyWriter{}
	w.failures.Store(3)
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir, StreamWriter: w, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	for _, e := range sampleEvents() {
		p.Emit(e)
	}
	flush(t, p)
	st := p.Stats()
	p.Close()
	if st.StreamErrors != 3 || st.Written != 15 || st.Failing {
		t.Fatalf("stats: %+v", st)
	}
	path := filepath.Join(dir, "out.jsonl")
	os.WriteFile(path, w.buf, 0o600)
	res, err := Verify(path)
	if err != nil || !res.OK() || res.Records != 15 {
		t.Fatalf("after failures: %+v %v", res, err)
	}
}

func TestFollow(t *testing.T) {
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir})
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan Event, 100)
	errc := make(chan error, 1)
	go func() {
		errc <- st.Follow(ctx, Query{Kind: KindDNS}, 10*time.Millisecond, func(e Event) error {
			got <- e
			return nil
		})
	}()
	for i := range 3 {
		for _, e := range sampleEvents() {
			e.ID = fmt.Sprint(e.ID, "-", i)
			p.Emit(e)
		}
		for range 2 { // two dns records per sample set, in order
			select {
			case e := <-got:
				if e.Kind != KindDNS || e.ID[len(e.ID)-1] != byte('0'+i) {
					t.Fatalf("round %d: followed %s %s", i, e.Kind, e.ID)
				}
			case <-ctx.Done():
				t.Fatalf("round %d: follow delivered nothing", i)
			}
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestSequencerHashIsLineHash(t *testing.T) {
	s := newSequencer()
	r, _ := encode(sampleEvents()[0])
	l, _ := s.next(r)
	if hex.EncodeToString(l.hash[:]) != HashLine(l.raw) {
		t.Fatal("line hash differs from HashLine")
	}
}

// TestStoreGroupCommit: the store holds events for its linger so that
// those close together share one transaction; the stream is not held, and
// Flush and Close do not wait out the linger.
func TestStoreGroupCommit(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StateDir: dir, StreamPath: stream, StoreLinger: time.Hour})
	ctx := context.Background()
	emit := func(n int) { emitDNS(p, n) }
	waitStream := func(n int) { waitLines(t, stream, n) }
	stored := func() int {
		t.Helper()
		evs, err := p.Store().Query(ctx, Query{})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	emit(3)
	waitStream(3)
	time.Sleep(50 * time.Millisecond)
	if n := stored(); n != 0 {
		t.Fatalf("the store wrote %d records inside its linger, want them held", n)
	}
	flushWithin(t, p)
	if n := stored(); n != 3 {
		t.Fatalf("after Flush the store has %d records, want 3", n)
	}
	emit(2)
	waitStream(5)
	closeWithin(t, p)
	st, err := OpenStore(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.Query(ctx, Query{})
	if err != nil || len(evs) != 5 {
		t.Fatalf("after Close the store has %d records (%v), want 5", len(evs), err)
	}
}

// TestWriterLinger: after a batch the writer lets events gather in the
// queue for its linger (their producers wake no goroutine); Flush and
// Close do not wait it out.
func TestWriterLinger(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StreamPath: stream, WriterLinger: time.Hour, StoreLinger: -1})
	emit := func(n int) { emitDNS(p, n) }
	lines := func() int { return countLines(stream) }
	emit(1)
	waitLines(t, stream, 1)
	emit(2)
	time.Sleep(100 * time.Millisecond)
	if n := lines(); n != 1 {
		t.Fatalf("the stream has %d records inside the writer's linger, want 1", n)
	}
	flushWithin(t, p)
	if n := lines(); n != 3 {
		t.Fatalf("after Flush the stream has %d records, want 3", n)
	}
	emit(2)
	closeWithin(t, p)
	if n := lines(); n != 5 {
		t.Fatalf("after Close the stream has %d records, want 5", n)
	}
}

// emitDNS emits n DNS events of sandbox sb-1.
func emitDNS(p *Pipeline, n int) {
	for range n {
		e := New(KindDNS, "sb-1")
		e.DNS = &DNS{QName: "a.example.test", QType: "A", RCode: "NOERROR"}
		p.Emit(e)
	}
}

func countLines(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("\n"))
}

// waitLines waits (at most 10 s) until the file at path has n lines.
func waitLines(t *testing.T, path string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); countLines(path) < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not get %d records", path, n)
		}
	}
}

// flushWithin and closeWithin fail the test when Flush or Close waits
// 10 s (a linger is set far longer).
func flushWithin(t *testing.T, p *Pipeline) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("Flush waited out the linger: %v", err)
	}
}

func closeWithin(t *testing.T, p *Pipeline) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited out the linger")
	}
}

// TestCheckpointOnlyAfterWrites: the checkpointer copies the WAL after
// the store was written and does nothing while it is idle (it ran a
// checkpoint every 100 ms, idle or not).
func TestCheckpointOnlyAfterWrites(t *testing.T) {
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir})
	emitDNS(p, 3)
	flush(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	check := func(when string, want bool) {
		t.Helper()
		if got := st.unchecked.Load(); got != want {
			t.Fatalf("%s: unchecked %v, want %v", when, got, want)
		}
	}
	check("after open", true)
	if err := st.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a checkpoint", false)
	if err := st.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	check("after an idle checkpoint", false)
	if _, err := st.Prune(ctx, Retention{MaxAge: time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	check("after a write", true)
	if err := st.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	check("after its checkpoint", false)
	if evs, err := st.Query(ctx, Query{}); err != nil || len(evs) != 3 {
		t.Fatalf("the store has %d records (%v), want 3", len(evs), err)
	}
}

// TestCheckpointerWakesOnWrite: in a running pipeline a write wakes the
// checkpointer, which copies the WAL a moment later (it waits for writes
// now, where it ticked every 100 ms).
func TestCheckpointerWakesOnWrite(t *testing.T) {
	p := newTestPipeline(t, Config{StateDir: t.TempDir()})
	for round := range 3 {
		emitDNS(p, 2)
		flush(t, p)
		for deadline := time.Now().Add(10 * time.Second); p.Store().unchecked.Load(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the WAL was not checkpointed after a write", round)
			}
		}
	}
}
