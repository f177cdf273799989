package audit

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dnsEvent is a dns record for name.
func dnsEvent(name string) Event {
	e := New(KindDNS, "sb-1")
	e.DNS = &DNS{QName: name, QType: "A", RCode: "NOERROR", Answers: []string{"198.18.1.1"}}
	return e
}

// openSecond opens a second writing connection to the pipeline's store,
// as another process would.
func openSecond(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(filepath.Join(dir, StoreFile), false))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// emitWithPoison makes the store in dir refuse, by a trigger another
// connection creates, every record naming poison.example.test, then
// emits n dns records, record i (from 0) of them naming it.
func emitWithPoison(t *testing.T, p *Pipeline, dir string, n, i int) {
	t.Helper()
	if _, err := openSecond(t, dir).Exec(`CREATE TRIGGER test_refuse BEFORE INSERT ON events
		WHEN CAST(NEW.raw AS TEXT) LIKE '%poison.example.test%' BEGIN SELECT RAISE(ABORT, 'refused by the test trigger'); END`); err != nil {
		t.Fatal(err)
	}
	for j := range n {
		name := "a.example.test"
		if j == i {
			name = "poison.example.test"
		}
		p.Emit(dnsEvent(name))
	}
}

// deadLetterEntry is a line of the dead-letter file.
type deadLetterEntry struct {
	Time     time.Time       `json:"time"`
	Sink     string          `json:"sink"`
	Seq      uint64          `json:"seq"`
	Kind     Kind            `json:"kind"`
	Reason   string          `json:"reason"`
	Error    string          `json:"error"`
	Attempts int             `json:"attempts"`
	Record   json.RawMessage `json:"record"`
}

// readDeadLetters reads the dead-letter file and checks its mode.
func readDeadLetters(t *testing.T, path string) []deadLetterEntry {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("dead-letter file: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("dead-letter file mode %04o, want 0600", st.Mode().Perm())
	}
	var out []deadLetterEntry
	for _, l := range readLines(t, path) {
		var d deadLetterEntry
		if err := json.Unmarshal(l, &d); err != nil {
			t.Fatalf("dead-letter line %q: %v", l, err)
		}
		out = append(out, d)
	}
	return out
}

// auditErrors returns the audit_error records among evs.
func auditErrors(evs []Event) []Event {
	var out []Event
	for _, e := range evs {
		if e.Kind == KindAuditError {
			out = append(out, e)
		}
	}
	return out
}

// lineOf returns the stream line with seq.
func lineOf(t *testing.T, lines [][]byte, seq uint64) []byte {
	t.Helper()
	for _, l := range lines {
		var h struct{ Seq uint64 }
		if json.Unmarshal(l, &h) == nil && h.Seq == seq {
			return l
		}
	}
	t.Fatalf("no stream line with seq %d", seq)
	return nil
}

// A record the store refuses for good (a trigger raises for it, in the
// middle of a batch) is given up on: Flush returns, the store has every
// other record, the dead-letter file has the refused one byte for byte,
// an audit_error record names it in the store and the stream, later
// records go through, and the stream's chain verifies.
func TestStoreRefusalIsDeadLettered(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StateDir: dir, StreamPath: stream, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	emitWithPoison(t, p, dir, 9, 4)
	flush(t, p) // returns although the store refuses one record for good
	for range 3 {
		p.Emit(dnsEvent("later.example.test"))
	}
	flush(t, p)
	st := p.Stats()
	if len(st.Rejected) != 1 || st.Rejected[0] != (Rejected{Sink: "store", Reason: ReasonConstraint, Records: 1}) || st.Failing {
		t.Fatalf("stats: %+v", st)
	}

	lines := readLines(t, stream)
	evs := decodeLines(t, lines)
	var poison uint64
	for _, e := range evs {
		if e.DNS != nil && e.DNS.QName == "poison.example.test" {
			poison = e.Seq
		}
	}
	if poison == 0 || len(evs) != 13 {
		t.Fatalf("the stream has %d records (want 9 + audit_error + 3), poison seq %d", len(evs), poison)
	}
	deadPath := filepath.Join(dir, DeadLetterFile)
	dl := readDeadLetters(t, deadPath)
	if len(dl) != 1 || dl[0].Sink != "store" || dl[0].Seq != poison || dl[0].Reason != ReasonConstraint ||
		!strings.Contains(dl[0].Error, "refused by the test trigger") || dl[0].Attempts < 3 {
		t.Fatalf("dead letters: %+v", dl)
	}
	if !bytes.Equal(dl[0].Record, lineOf(t, lines, poison)) {
		t.Errorf("the dead-letter record is not the chained record:\n%s\n%s", dl[0].Record, lineOf(t, lines, poison))
	}

	ctx := context.Background()
	stored, err := p.Store().Query(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 12 {
		t.Errorf("the store has %d records, want 12 (all but the refused one)", len(stored))
	}
	for _, got := range [][]Event{auditErrors(evs), auditErrors(stored)} {
		if len(got) != 1 {
			t.Fatalf("audit_error records: %+v", got)
		}
		a := got[0].AuditError
		if a == nil || a.Sink != "store" || a.Seq != poison || a.RecordKind != KindDNS || a.Reason != ReasonConstraint ||
			a.DeadLetter != deadPath || !strings.Contains(got[0].Reason, deadPath) {
			t.Errorf("audit_error: %+v %+v", got[0], a)
		}
	}
	if a := auditErrors(stored)[0].AuditError; a.RecordSandbox != "sb-1" {
		t.Errorf("audit_error does not name the refused record's sandbox: %+v", a)
	}
	r, err := BuildReport(ctx, p.Store(), "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if len(r.Refused) != 1 || r.Refused[0].Seq != poison ||
		!strings.Contains(md.String(), fmt.Sprintf("the store refused this sandbox's dns record seq %d for good (constraint)", poison)) {
		t.Errorf("the report does not warn of the refused record: %+v\n%s", r.Refused, md.String())
	}
	var page bytes.Buffer
	if err := r.HTML(&page); err != nil || !strings.Contains(page.String(), fmt.Sprintf("refused this sandbox&#39;s dns record seq %d", poison)) {
		t.Errorf("the HTML report does not warn of the refused record: %v", err)
	}
	if _, err := p.Store().Raw(ctx, poison); !errors.Is(err, ErrNotStored) {
		t.Errorf("the refused record is in the store: %v", err)
	}
	res, err := Verify(stream)
	if err != nil || !res.OK() || res.Records != 13 {
		t.Fatalf("verify: %+v %v", res, err)
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), "the store refused seq") {
		t.Errorf("verify does not explain the refused record: %q", res.Notes)
	}
}

// Two writers numbering records the same way (two appliances on one
// store) collide on seq: the UNIQUE failure is not retried forever.
func TestSeqCollisionIsDeadLettered(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StateDir: dir, StreamPath: stream, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	p.Emit(dnsEvent("first.example.test"))
	flush(t, p)
	db := openSecond(t, dir)
	foreign := `{"schema":1,"kind":"dns","node":"other","seq":2}`
	if _, err := db.Exec(`INSERT INTO events (seq, time, kind, sandbox, verdict, category, host, would_deny, raw)
		VALUES (2, 0, 'dns', '', '', '', '', 0, ?)`, foreign); err != nil {
		t.Fatal(err)
	}
	p.Emit(dnsEvent("collides.example.test")) // seq 2
	flush(t, p)
	p.Emit(dnsEvent("later.example.test"))
	flush(t, p)

	dl := readDeadLetters(t, filepath.Join(dir, DeadLetterFile))
	if len(dl) != 1 || dl[0].Seq != 2 || dl[0].Reason != ReasonConstraint || !strings.Contains(dl[0].Error, "UNIQUE") ||
		!bytes.Contains(dl[0].Record, []byte("collides.example.test")) {
		t.Fatalf("dead letters: %+v", dl)
	}
	ctx := context.Background()
	if raw, err := p.Store().Raw(ctx, 2); err != nil || string(raw) != foreign {
		t.Errorf("seq 2 in the store: %s %v", raw, err)
	}
	stored, err := p.Store().Query(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 4 || stored[2].Kind != KindAuditError || stored[2].AuditError.Seq != 2 ||
		stored[3].DNS == nil || stored[3].DNS.QName != "later.example.test" {
		t.Fatalf("store after the collision: %+v", stored)
	}
	if res, err := Verify(stream); err != nil || !res.OK() || res.Records != 4 {
		t.Fatalf("verify: %+v %v", res, err)
	}
}

// refusingWriter refuses, writing nothing, any write holding marker, as
// a file too big for the file system does (EFBIG); it keeps the rest.
type refusingWriter struct {
	marker string
	mu     sync.Mutex
	buf    []byte
}

func (w *refusingWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if bytes.Contains(b, []byte(w.marker)) {
		return 0, &os.PathError{Op: "write", Path: "stdout", Err: syscall.EFBIG}
	}
	w.buf = append(w.buf, b...)
	return len(b), nil
}

// A record the stream refuses for good is missing from the stream, and
// verify says why (the audit_error record that follows names it) instead
// of reporting a deletion; a line deleted besides is still reported.
func TestStreamRefusalVerifies(t *testing.T) {
	dir := t.TempDir()
	w := &refusingWriter{marker: "poison.example.test"}
	deadPath := filepath.Join(dir, "dead.jsonl")
	p := newTestPipeline(t, Config{StreamWriter: w, StreamFormat: FormatOCSF, DeadLetterPath: deadPath,
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	for i := range 6 {
		name := "a.example.test"
		if i == 2 {
			name = "poison.example.test"
		}
		p.Emit(dnsEvent(name))
	}
	flush(t, p)
	p.Emit(dnsEvent("later.example.test"))
	flush(t, p)
	p.Close()
	dl := readDeadLetters(t, deadPath)
	if len(dl) != 1 || dl[0].Sink != "stream" || dl[0].Seq != 3 || dl[0].Reason != ReasonTooBig {
		t.Fatalf("dead letters: %+v", dl)
	}
	var ocsfLine struct {
		Unmapped struct {
			Airlock json.RawMessage `json:"airlock"`
		} `json:"unmapped"`
	}
	if err := json.Unmarshal(dl[0].Record, &ocsfLine); err != nil || !bytes.Contains(ocsfLine.Unmapped.Airlock, []byte(`"seq":3,`)) {
		t.Errorf("the dead-letter record is not the OCSF line the stream refused: %s %v", dl[0].Record, err)
	}
	path := filepath.Join(dir, "events.jsonl")
	if err := os.WriteFile(path, w.buf, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Verify(path)
	if err != nil || !res.OK() || res.Records != 7 {
		t.Fatalf("verify across a refused record: %+v %v", res, err)
	}
	notes := strings.Join(res.Notes, "\n")
	if !strings.Contains(notes, "the stream refused seq 3 (too_big)") || !strings.Contains(notes, deadPath) {
		t.Errorf("verify does not explain seq 3: %q", res.Notes)
	}

	lines := readLines(t, path)
	writeLines(t, path, append(lines[:3:3], lines[4:]...)) // seq 5 deleted besides
	res, err = Verify(path)
	if err != nil || len(res.Problems) != 1 || res.Problems[0].Kind != "deleted" || !strings.Contains(res.Problems[0].Msg, "seq 5 is missing") {
		t.Fatalf("a deletion next to a refused record: %+v %v", res, err)
	}
}

// An event the encoder cannot encode (a time past year 9999) goes to
// the dead-letter file with what can be kept of it, and an audit_error
// record says so; it is not reported as a queue drop.
func TestEncodeFailureIsDeadLettered(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StateDir: dir, StreamPath: stream})
	e := dnsEvent("future.example.test")
	e.Time = time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)
	p.Emit(e)
	flush(t, p)
	st := p.Stats()
	if st.Dropped != 0 || len(st.Rejected) != 1 || st.Rejected[0] != (Rejected{Sink: "pipeline", Reason: ReasonEncode, Records: 1}) {
		t.Fatalf("stats: %+v", st)
	}
	dl := readDeadLetters(t, filepath.Join(dir, DeadLetterFile))
	if len(dl) != 1 || dl[0].Seq != 0 || dl[0].Kind != KindDNS || !strings.Contains(dl[0].Error, "year") ||
		!bytes.Contains(dl[0].Record, []byte("future.example.test")) {
		t.Fatalf("dead letters: %+v", dl)
	}
	evs := decodeLines(t, readLines(t, stream))
	if len(evs) != 1 || evs[0].AuditError == nil || evs[0].AuditError.Sink != "pipeline" || evs[0].AuditError.Reason != ReasonEncode {
		t.Fatalf("stream: %+v", evs)
	}
	res, err := Verify(stream)
	if err != nil || !res.OK() || !strings.Contains(strings.Join(res.Notes, "\n"), "could not be encoded") {
		t.Fatalf("verify: %+v %v", res, err)
	}
}

// A transient failure (another connection holds the store's write lock)
// is retried, counted and logged until it clears; nothing is given up.
func TestHeldLockRetriesAndLosesNothing(t *testing.T) {
	defer func(d time.Duration) { busyTimeout = d }(busyTimeout)
	busyTimeout = 20 * time.Millisecond
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StateDir: dir, StreamPath: stream, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := openSecond(t, dir).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		p.Emit(dnsEvent("a.example.test"))
	}
	// Wait for the writer to be refused more than GiveUpAfter times: a
	// busy store is not given up on however long it stays busy.
	for p.Stats().Transient < 10 {
		select {
		case <-ctx.Done():
			t.Fatalf("the held lock was never met: %+v", p.Stats())
		case <-time.After(time.Millisecond):
		}
	}
	if st := p.Stats(); !st.Failing || len(st.Rejected) != 0 {
		t.Fatalf("stats while the lock is held: %+v", st)
	}
	if _, err := c.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	flush(t, p)
	st := p.Stats()
	if st.Failing || len(st.Rejected) != 0 || st.Written != 20 {
		t.Fatalf("stats after the lock is released: %+v", st)
	}
	stored, err := p.Store().Query(ctx, Query{})
	if err != nil || len(stored) != 20 {
		t.Fatalf("the store has %d records, want 20: %v", len(stored), err)
	}
	if _, err := os.Stat(filepath.Join(dir, DeadLetterFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dead-letter file after transient failures only: %v", err)
	}
}

// The dead-letter file is rotated at its bound, to one kept file.
func TestDeadLetterRotates(t *testing.T) {
	dir := t.TempDir()
	d := deadLetter{path: filepath.Join(dir, DeadLetterFile), maxBytes: 100}
	line := bytes.Repeat([]byte("x"), 40)
	for i := range 5 {
		line[0] = byte('0' + i)
		if err := d.write(line); err != nil {
			t.Fatal(err)
		}
	}
	d.close()
	cur, old := readLines(t, d.path), readLines(t, d.path+".1")
	if len(cur) != 1 || cur[0][0] != '4' || len(old) != 2 || old[0][0] != '2' {
		t.Fatalf("after rotation: %q, rotated %q", cur, old)
	}
}

// blockRotation makes the dead-letter file's rotation fail for real: its
// rotated path is a non-empty directory, which rename(2) cannot replace.
// The returned func lifts the block.
func blockRotation(t *testing.T, path string) (unblock func()) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(path+".1", "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.RemoveAll(path + ".1"); err != nil {
			t.Fatal(err)
		}
	}
}

// fileSize is the size of path (0 when it does not exist).
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// While the dead-letter file is full and its rotation fails, it never
// grows past its bound: each line is refused with an error naming the
// failed rotation, and the rotation is tried again at the next line, which
// goes through once the rename can. (It was reopened after a failed
// rename and appended to without bound.)
func TestDeadLetterRotationFailureKeepsBound(t *testing.T) {
	dir := t.TempDir()
	d := deadLetter{path: filepath.Join(dir, DeadLetterFile), maxBytes: 100}
	defer d.close()
	line := bytes.Repeat([]byte("x"), 40)
	for i := range 2 {
		line[0] = byte('0' + i)
		if err := d.write(line); err != nil {
			t.Fatal(err)
		}
	}
	unblock := blockRotation(t, d.path)
	for i := range 5 {
		line[0] = byte('a' + i)
		err := d.write(line)
		if err == nil || !strings.Contains(err.Error(), "could not be rotated") {
			t.Errorf("write %d with rotation blocked: %v", i, err)
		}
		if n := fileSize(t, d.path); n > d.maxBytes {
			t.Fatalf("write %d: the dead-letter file has %d bytes, past its bound of %d", i, n, d.maxBytes)
		}
	}
	unblock()
	line[0] = 'z'
	if err := d.write(line); err != nil {
		t.Fatalf("write after the block is lifted: %v", err)
	}
	cur, old := readLines(t, d.path), readLines(t, d.path+".1")
	if len(cur) != 1 || cur[0][0] != 'z' || len(old) != 2 || old[0][0] != '0' || old[1][0] != '1' {
		t.Fatalf("after the retried rotation: %q, rotated %q", cur, old)
	}
}

// TestDeadLetterFileRemoved: an operator removes (or moves away) the
// dead-letter file while the appliance runs: the next record goes to a new
// file at the path, never into the removed one, and the bound still holds.
func TestDeadLetterFileRemoved(t *testing.T) {
	dir := t.TempDir()
	d := deadLetter{path: filepath.Join(dir, DeadLetterFile), maxBytes: 100}
	defer d.close()
	line := bytes.Repeat([]byte("x"), 40)
	if err := d.write(line); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(d.path, filepath.Join(dir, "read-by-the-operator")); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		line[0] = byte('a' + i)
		if err := d.write(line); err != nil {
			t.Fatalf("write %d after the file was moved away: %v", i, err)
		}
		if n := fileSize(t, d.path); n > d.maxBytes {
			t.Fatalf("write %d: the dead-letter file has %d bytes, past its bound of %d", i, n, d.maxBytes)
		}
	}
	cur, old := readLines(t, d.path), readLines(t, d.path+".1")
	// Two lines fit the bound; one rotated file is kept: a and b rotated
	// away, c and d in it, e in the new file.
	if len(cur) != 1 || cur[0][0] != 'e' || len(old) != 2 || old[0][0] != 'c' || old[1][0] != 'd' {
		t.Fatalf("after the move: %q, rotated %q", cur, old)
	}
	if moved := readLines(t, filepath.Join(dir, "read-by-the-operator")); len(moved) != 1 {
		t.Fatalf("the moved file got more lines: %q", moved)
	}
}

// In the pipeline, a record given up on while the dead-letter file cannot
// be rotated is not kept there (the file stays within its bound), and that
// is reported: counted in Stats.DeadLetterErrors and the metric, and its
// audit_error record has no dead_letter and says why. Once rotation works
// again, the next record is dead-lettered.
func TestDeadLetterRotationFailureIsReported(t *testing.T) {
	dir := t.TempDir()
	deadPath := filepath.Join(dir, DeadLetterFile)
	const bound = 800
	p := newTestPipeline(t, Config{StateDir: dir, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
		DeadLetterMaxBytes: bound})
	emitWithPoison(t, p, dir, 1, 0)
	flush(t, p)
	first := fileSize(t, deadPath)
	if first == 0 || 2*first <= bound {
		t.Fatalf("the first dead letter has %d bytes: the test needs one that fits the bound of %d and two that do not", first, bound)
	}
	unblock := blockRotation(t, deadPath)
	const blocked = 3
	for i := range blocked {
		p.Emit(dnsEvent("poison.example.test"))
		flush(t, p)
		if n := fileSize(t, deadPath); n != first {
			t.Fatalf("poison record %d with rotation blocked: the dead-letter file has %d bytes, want %d (bound %d)", i+2, n, first, bound)
		}
	}
	st := p.Stats()
	if st.DeadLetterErrors != blocked || len(st.Rejected) != 1 || st.Rejected[0].Records != blocked+1 {
		t.Fatalf("stats: dead-letter errors %d (want %d), rejected %+v", st.DeadLetterErrors, blocked, st.Rejected)
	}
	if got := collectedCounter(t, NewCollector(p.Stats), "airlock_audit_dead_letter_errors_total"); got != blocked {
		t.Errorf("airlock_audit_dead_letter_errors_total %v, want %d", got, blocked)
	}
	stored, err := p.Store().Query(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	aes := auditErrors(stored)
	if len(aes) != blocked+1 || aes[0].AuditError.DeadLetter != deadPath {
		t.Fatalf("audit_error records: %+v", aes)
	}
	for _, e := range aes[1:] {
		if e.AuditError.DeadLetter != "" || !strings.Contains(e.Reason, "the dead-letter file could not take the record") ||
			!strings.Contains(e.Reason, "could not be rotated") {
			t.Errorf("audit_error for a record the dead-letter file refused: reason %q, dead_letter %q", e.Reason, e.AuditError.DeadLetter)
		}
	}
	unblock()
	p.Emit(dnsEvent("poison.example.test"))
	flush(t, p)
	if cur, old := readDeadLetters(t, deadPath), readDeadLetters(t, deadPath+".1"); len(cur) != 1 || len(old) != 1 || cur[0].Seq <= old[0].Seq {
		t.Errorf("after the block is lifted: dead letters %+v, rotated %+v", cur, old)
	}
	if st := p.Stats(); st.DeadLetterErrors != blocked {
		t.Errorf("dead-letter errors %d after the block is lifted, want %d", st.DeadLetterErrors, blocked)
	}
}

// classifyWriteErr tells the errors a record always meets from those that
// clear, on real SQLite errors and errno values.
func TestClassifyWriteErr(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	db.Exec(`INSERT INTO t VALUES (1, 'a')`)
	_, unique := db.Exec(`INSERT INTO t VALUES (1, 'b')`)
	_, notNull := db.Exec(`INSERT INTO t VALUES (2, NULL)`)
	_, mismatch := db.Exec(`INSERT INTO t VALUES ('x', 'b')`)
	for _, c := range []struct {
		err       error
		permanent bool
		reason    string
	}{
		{unique, true, ReasonConstraint},
		{notNull, true, ReasonConstraint},
		{mismatch, true, ReasonMismatch},
		{&os.PathError{Op: "write", Err: syscall.ENOSPC}, false, "disk_full"},
		{&os.PathError{Op: "write", Err: syscall.EIO}, false, "io"},
		{&os.PathError{Op: "write", Err: syscall.EFBIG}, true, ReasonTooBig},
		{errors.New("no space left on device"), false, "other"},
	} {
		if perm, reason := classifyWriteErr(c.err); perm != c.permanent || reason != c.reason {
			t.Errorf("%v: permanent %v, reason %q; want %v, %q", c.err, perm, reason, c.permanent, c.reason)
		}
	}
}

// A store that refuses every record does not hang the pipeline nor loop:
// each record and each audit_error record naming one is given up on,
// and the audit_error records (in the stream) get none of their own.
func TestStoreRefusingEverythingDoesNotLoop(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StateDir: dir, StreamPath: stream, BatchSize: 16, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond})
	db := openSecond(t, dir)
	if _, err := db.Exec(`CREATE TRIGGER test_refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'refused by the test trigger'); END`); err != nil {
		t.Fatal(err)
	}
	const n = 50
	for range n {
		p.Emit(dnsEvent("a.example.test"))
	}
	flush(t, p)
	flush(t, p) // the audit_error records
	st := p.Stats()
	if len(st.Rejected) != 1 || st.Rejected[0].Records != 2*n {
		t.Fatalf("stats: %+v", st)
	}
	if dl := readDeadLetters(t, filepath.Join(dir, DeadLetterFile)); len(dl) != 2*n {
		t.Errorf("%d dead letters, want %d", len(dl), 2*n)
	}
	evs := decodeLines(t, readLines(t, stream))
	if len(evs) != 2*n || len(auditErrors(evs)) != n {
		t.Errorf("the stream has %d records, %d audit_error; want %d, %d", len(evs), len(auditErrors(evs)), 2*n, n)
	}
	if res, err := Verify(stream); err != nil || !res.OK() {
		t.Fatalf("verify: %+v %v", res, err)
	}
}

// Closing while the store refuses a record for good gives up on that
// record alone: the others in its batch are stored, none is lost.
func TestCloseWithRefusedRecordLosesOnlyIt(t *testing.T) {
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir, GiveUpAfter: 1000, RetryMin: time.Hour, RetryMax: time.Hour})
	emitWithPoison(t, p, dir, 8, 3)
	// Wait until the store has refused the batch once (the writer then
	// waits an hour before its next try), and close.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for p.Stats().StoreErrors == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("the store never refused the batch: %+v", p.Stats())
		case <-time.After(time.Millisecond):
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Lost != 0 || st.Written != 9 || len(st.Rejected) != 1 || st.Rejected[0].Records != 1 {
		t.Fatalf("stats after close: %+v", st)
	}
	s, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stored, err := s.Query(ctx, Query{Kind: KindDNS})
	if err != nil || len(stored) != 7 {
		t.Fatalf("the store has %d dns records after close, want 7: %v", len(stored), err)
	}
	if errs, err := s.Query(ctx, Query{Kind: KindAuditError}); err != nil || len(errs) != 1 || errs[0].AuditError.Seq != 4 {
		t.Errorf("audit_error records after close: %+v %v", errs, err)
	}
	if dl := readDeadLetters(t, filepath.Join(dir, DeadLetterFile)); len(dl) != 1 || dl[0].Seq != 4 {
		t.Errorf("dead letters: %+v", dl)
	}
}
