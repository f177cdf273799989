package audit

import (
	"airlock/internal/safefile"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"airlock/internal/jsonstr"
)

func appendAuditError(b []byte, a *AuditError) []byte {
	if a == nil {
		return b
	}
	b = jsonstr.Append(append(b, `,"audit_error":{"sink":`...), a.Sink)
	b = optUint(b, `,"seq":`, a.Seq)
	b = optString(b, `,"record_kind":`, string(a.RecordKind))
	b = optString(b, `,"record_sandbox":`, a.RecordSandbox)
	b = jsonstr.Append(append(b, `,"reason":`...), a.Reason)
	b = jsonstr.Append(append(b, `,"error":`...), a.Error)
	b = optString(b, `,"dead_letter":`, a.DeadLetter)
	return append(optInt(b, `,"attempts":`, int64(a.Attempts)), '}')
}

// errQueue bounds the audit_error records waiting for the writer; beyond
// it one is counted in a gap record instead (the dead-letter file and the
// log still have the record it is about).
const errQueue = 1024

// DeadLetterFile is the dead-letter file's name in the state directory.
const DeadLetterFile = "audit-deadletter.jsonl"

// Reasons a record is given up on: its sink refused it for good, or it
// could not be encoded. Every other failure is transient and retried.
const (
	ReasonConstraint = "constraint" // a constraint failed (a seq already stored, a trigger refused it)
	ReasonTooBig     = "too_big"    // larger than the sink takes (SQLITE_TOOBIG, EFBIG)
	ReasonMismatch   = "mismatch"   // a value of the wrong type for its column
	ReasonEncode     = "encode"     // the encoder could not encode the event
)

// SQLite's primary result codes (the low byte of an extended code).
const (
	sqliteIOErr      = 10
	sqliteBusy       = 5
	sqliteLocked     = 6
	sqliteFull       = 13
	sqliteTooBig     = 18
	sqliteConstraint = 19
	sqliteMismatch   = 20
)

// classifyWriteErr tells a write error that can clear by itself (busy, locked,
// disk full, I/O errors, anything unknown: retried, as long as it takes)
// from one that the same record will always meet (permanent: the record is
// given up on). reason names it for the counters and the log.
func classifyWriteErr(err error) (permanent bool, reason string) {
	var se interface{ Code() int }
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqliteConstraint:
			return true, ReasonConstraint
		case sqliteTooBig:
			return true, ReasonTooBig
		case sqliteMismatch:
			return true, ReasonMismatch
		case sqliteBusy:
			return false, "busy"
		case sqliteLocked:
			return false, "locked"
		case sqliteFull:
			return false, "disk_full"
		case sqliteIOErr:
			return false, "io"
		}
		return false, "sqlite_" + strconv.Itoa(se.Code()&0xff)
	}
	switch {
	case errors.Is(err, syscall.EFBIG):
		return true, ReasonTooBig
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return false, "disk_full"
	case errors.Is(err, syscall.EIO):
		return false, "io"
	}
	return false, "other"
}

// deadLetter is the dead-letter file: one JSON line per record given up
// on, mode 0600 (records hold what sandboxes did), rotated at maxBytes to
// path.1 (one rotated file kept), so it never holds more than twice that.
// The bound fails closed: while the file is full and cannot be rotated (a
// rename that fails), a line is refused rather than appended, and the
// rotation is tried again at the next line. Only a single line larger
// than maxBytes is written past it, alone in an empty file.
type deadLetter struct {
	mu       sync.Mutex
	path     string
	maxBytes int64
	f        *os.File
	size     int64
	closed   bool // the pipeline closed: a late write is refused, not reopened
}

// write appends line and a newline. On error nothing is left of it.
func (d *deadLetter) write(line []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.path == "":
		return errors.New("audit: no dead-letter file (no state directory or stream file)")
	case d.closed:
		return errors.New("audit: dead-letter file closed (the pipeline closed)")
	}
	if d.f != nil && !d.stillAtPath() { // moved or removed (read, rotated by hand): a new file at the path
		d.f.Close()
		d.f = nil
	}
	if d.f == nil {
		if err := d.open(); err != nil {
			return err
		}
	}
	if d.size > 0 && d.size+int64(len(line))+1 > d.maxBytes {
		if err := os.Rename(d.path, d.path+".1"); err != nil { // the full file stays open: the next write tries again
			return fmt.Errorf("audit: dead-letter file %s is at its bound (%d of %d bytes) and could not be rotated; the line is not written: %w",
				d.path, d.size, d.maxBytes, err)
		}
		d.f.Close()
		d.f = nil
		if err := d.open(); err != nil {
			return err
		}
	}
	if _, err := d.f.WriteAt(append(line, '\n'), d.size); err != nil {
		return errors.Join(fmt.Errorf("audit: write dead-letter file %s: %w", d.path, err), d.f.Truncate(d.size))
	}
	d.size += int64(len(line)) + 1
	return nil
}

// stillAtPath tells whether the open file is still the one at d.path.
func (d *deadLetter) stillAtPath() bool {
	at, err := os.Lstat(d.path)
	if err != nil {
		return false
	}
	open, err := d.f.Stat()
	return err == nil && os.SameFile(at, open)
}

func (d *deadLetter) open() error {
	f, st, err := safefile.OpenRegular(d.path, os.O_CREATE, StoreMode)
	if err != nil {
		return fmt.Errorf("audit: open dead-letter file: %w", err)
	}
	if st.Mode().Perm() != StoreMode {
		err = f.Chmod(StoreMode)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("audit: open dead-letter file: %w", err)
	}
	d.f, d.size = f, st.Size()
	return nil
}

func (d *deadLetter) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.f == nil {
		return nil
	}
	err := d.f.Close()
	d.f = nil
	return err
}

// rejection is one record given up on.
type rejection struct {
	sink     string
	seq      uint64 // 0: never sequenced
	kind     Kind
	sandbox  string
	reason   string
	err      error
	attempts int
	record   []byte // the record's JSON as the sink would have written it
}

// deadLetterLine is the dead-letter file's line for r: what happened,
// then the record byte for byte (its chain hash is that of these bytes);
// a record too large for the file is named by its size and hash instead.
func (d *deadLetter) line(r rejection) []byte {
	b := append([]byte(nil), `{"time":`...)
	b = jsonstr.Append(b, time.Now().UTC().Format(time.RFC3339Nano))
	b = jsonstr.Append(append(b, `,"sink":`...), r.sink)
	b = optUint(b, `,"seq":`, r.seq)
	b = optString(b, `,"kind":`, string(r.kind))
	b = optString(b, `,"sandbox":`, r.sandbox)
	b = jsonstr.Append(append(b, `,"reason":`...), r.reason)
	b = jsonstr.Append(append(b, `,"error":`...), r.err.Error())
	b = optInt(b, `,"attempts":`, int64(r.attempts))
	switch {
	case r.record == nil:
	case int64(len(r.record)) > d.maxBytes/2:
		sum := sha256.Sum256(r.record)
		b = strconv.AppendInt(append(b, `,"record_bytes":`...), int64(len(r.record)), 10)
		b = jsonstr.Append(append(b, `,"record_sha256":`...), hex.EncodeToString(sum[:]))
	default:
		b = append(append(b, `,"record":`...), r.record...)
	}
	return append(b, '}')
}

// reject gives up on a record for good, never silently: it goes to the
// dead-letter file, is counted (Stats.Rejected), logged (at most one line
// per sink every failureLogEvery, with the count), and an audit_error
// record naming it is written to every sink, in the chain. When the
// dead-letter file cannot take it, that is counted too
// (Stats.DeadLetterErrors) and the audit_error record says why. An audit_error
// record that is itself refused gets no audit_error of its own.
func (p *Pipeline) reject(r rejection) {
	where := p.dead.path
	dlErr := p.dead.write(p.dead.line(r))
	if dlErr != nil {
		where = ""
		p.deadErrs.Add(1)
	}
	n := p.countRejected(r.sink, r.reason)
	if p.rateOK("rejected "+r.sink, false) || dlErr != nil {
		p.log.Error("audit: "+r.sink+" refused a record for good; given up on it", "seq", r.seq, "kind", r.kind,
			"reason", r.reason, "err", r.err, "dead_letter", where, "dead_letter_err", dlErr, "rejected_total", n)
	}
	if r.kind == KindAuditError {
		return
	}
	e := New(KindAuditError, "")
	what := "a " + string(r.kind) + " record that could not be encoded"
	if r.seq != 0 {
		what = "seq " + strconv.FormatUint(r.seq, 10)
	}
	e.Reason = fmt.Sprintf("the %s refused %s for good (%s)", r.sink, what, r.reason)
	if where != "" {
		e.Reason += "; the record is in " + where
	} else {
		e.Reason += "; the dead-letter file could not take the record: " + dlErr.Error()
	}
	e.AuditError = &AuditError{Sink: r.sink, Seq: r.seq, RecordKind: r.kind, RecordSandbox: r.sandbox, Reason: r.reason,
		Error: r.err.Error(), DeadLetter: where, Attempts: r.attempts}
	rec, err := p.enc.encode(e)
	if err != nil {
		p.log.Error("audit: audit_error record not encodable", "err", err)
		return
	}
	select {
	case p.errq <- rec:
		p.accepted.Add(1)
	default:
		p.drop()
		if p.rateOK("audit_error queue", false) {
			p.log.Error("audit: too many audit_error records waiting; those beyond are counted in a gap record (the dead-letter file has their records)", "seq", r.seq)
		}
	}
}

// rejectEvent gives up on an event the encoder could not encode.
func (p *Pipeline) rejectEvent(e Event, err error) {
	// What can be kept of it: the event with the field encoders refuse
	// (an out-of-range time) left out; the error names the value.
	c := e
	c.Time, c.Gap = time.Time{}, nil
	raw, merr := json.Marshal(c)
	if merr != nil {
		raw = nil
	}
	p.reject(rejection{sink: "pipeline", kind: e.Kind, sandbox: e.Sandbox, reason: ReasonEncode, err: err, record: raw})
}

// countRejected counts a record given up on; it returns the total so far.
func (p *Pipeline) countRejected(sink, reason string) uint64 {
	p.rejMu.Lock()
	defer p.rejMu.Unlock()
	k := [2]string{sink, reason}
	p.rejected[k]++
	var n uint64
	for _, v := range p.rejected {
		n += v
	}
	return n
}

// Rejected counts the records given up on for one sink and reason.
type Rejected struct {
	Sink    string // store | stream | pipeline
	Reason  string // constraint | too_big | mismatch | encode
	Records uint64
}

func (p *Pipeline) rejectedStats() []Rejected {
	p.rejMu.Lock()
	defer p.rejMu.Unlock()
	out := make([]Rejected, 0, len(p.rejected))
	for k, v := range p.rejected {
		out = append(out, Rejected{Sink: k[0], Reason: k[1], Records: v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Sink != out[j].Sink {
			return out[i].Sink < out[j].Sink
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}
