package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// MaxShellRecordBytes bounds one shell session's record; what comes after
// is counted, not kept, and the record says it was cut.
const MaxShellRecordBytes = 1 << 20

// shellFlush is how much one direction buffers before a record line is
// written without a line end in it.
const shellFlush = 4096

// ShellLine is one line of a shell record (shells/ID.jsonl): the first
// holds the session (Start), then what was typed (In) and shown (Out),
// each with its time, and the last how it ended (End). Known secret
// values are replaced by [REDACTED] before anything is written.
type ShellLine struct {
	Time  time.Time   `json:"t"`
	Start *ShellStart `json:"start,omitempty"`
	In    string      `json:"in,omitempty"`
	Out   string      `json:"out,omitempty"`
	End   *ShellEnd   `json:"end,omitempty"`
}

// ShellStart describes a recorded session.
type ShellStart struct {
	Sandbox   string   `json:"sandbox"`
	Exec      string   `json:"exec"`
	Principal string   `json:"principal,omitempty"`
	Argv      []string `json:"argv"`
	Rows      uint16   `json:"rows,omitempty"`
	Cols      uint16   `json:"cols,omitempty"`
}

// ShellEnd is how a recorded session ended and what the record holds.
type ShellEnd struct {
	ExitCode   int   `json:"exit_code"`
	InBytes    int64 `json:"in_bytes"`
	OutBytes   int64 `json:"out_bytes"`
	Redactions int   `json:"redactions,omitempty"`
	// Cut: the record reached MaxShellRecordBytes; later bytes are counted
	// in InBytes/OutBytes only.
	Cut bool `json:"cut,omitempty"`
}

// shellRecorder writes a session's record as it happens.
type shellRecorder struct {
	mu      sync.Mutex
	f       *os.File
	name    string // the artifact name, shells/ID.jsonl
	secrets []string
	keep    int // bytes held back for a secret split across writes
	now     func() time.Time
	in, out shellDir
	written int64
	end     ShellEnd
}

type shellDir struct {
	buf   []byte
	since time.Time
}

func (r *Runner) shellsDir(id string) string { return filepath.Join(r.sandboxesDir(), id, "shells") }

// openShellRecord starts the record of a terminal session.
func (r *Runner) openShellRecord(st ShellStart) (*shellRecorder, error) {
	dir := r.shellsDir(st.Sandbox)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("shell record: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, st.Exec+".jsonl"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shell record: %w", err)
	}
	rec := &shellRecorder{f: f, name: "shells/" + st.Exec + ".jsonl", secrets: r.secrets(st.Sandbox), now: r.cfg.Now}
	for _, s := range rec.secrets {
		rec.keep = max(rec.keep, len(s)-1)
	}
	rec.line(ShellLine{Time: rec.now().UTC(), Start: &st})
	return rec, nil
}

// typed and shown are the writers of the two directions.
func (s *shellRecorder) typed() io.Writer {
	return writerFunc(func(p []byte) (int, error) { return s.add(&s.in, true, p) })
}
func (s *shellRecorder) shown() io.Writer {
	return writerFunc(func(p []byte) (int, error) { return s.add(&s.out, false, p) })
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (s *shellRecorder) add(d *shellDir, in bool, p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in {
		s.end.InBytes += int64(len(p))
	} else {
		s.end.OutBytes += int64(len(p))
	}
	if len(d.buf) == 0 {
		d.since = s.now().UTC()
	}
	d.buf = append(d.buf, p...)
	s.flush(d, in, false)
	return len(p), nil // the session never fails for its record
}

// flush writes what d holds up to its last line end (all of it at the
// end); over shellFlush bytes without one, all but the tail that could
// start a secret.
func (s *shellRecorder) flush(d *shellDir, in, all bool) {
	n := len(d.buf)
	if !all {
		n = bytes.LastIndexAny(d.buf, "\r\n") + 1
		if n == 0 && len(d.buf) > shellFlush {
			n = len(d.buf) - s.keep
		}
	}
	if n <= 0 {
		return
	}
	text, k := redact(string(d.buf[:n]), s.secrets)
	s.end.Redactions += k
	l := ShellLine{Time: d.since}
	if in {
		l.In = text
	} else {
		l.Out = text
	}
	s.line(l)
	d.buf = append(d.buf[:0], d.buf[n:]...)
	d.since = s.now().UTC()
}

// line writes one record line; past MaxShellRecordBytes only the end
// line is written.
func (s *shellRecorder) line(l ShellLine) {
	b, err := json.Marshal(l)
	if err != nil {
		return
	}
	b = append(b, '\n')
	if l.End == nil && (s.end.Cut || s.written+int64(len(b)) > MaxShellRecordBytes) {
		s.end.Cut = true
		return
	}
	if _, err := s.f.Write(b); err == nil {
		s.written += int64(len(b))
	}
}

// close writes what is buffered and the end line.
func (s *shellRecorder) close(exit int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flush(&s.in, true, true)
	s.flush(&s.out, false, true)
	s.end.ExitCode = exit
	e := s.end
	s.line(ShellLine{Time: s.now().UTC(), End: &e})
	return s.f.Close()
}

// ReadShellRecord parses a shell record, line by line.
func ReadShellRecord(rd io.Reader) ([]ShellLine, error) {
	dec := json.NewDecoder(rd)
	var out []ShellLine
	for i := 1; ; i++ {
		var l ShellLine
		err := dec.Decode(&l)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("shell record line %d: %w", i, err)
		}
		out = append(out, l)
	}
}

// shells copies the sandbox's shell records into the artifacts.
func (x *exporter) shells() error {
	dir := x.r.shellsDir(x.sb.ID)
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".jsonl") {
			continue
		}
		if err := x.shell(filepath.Join(dir, e.Name()), "shells/"+e.Name()); err != nil {
			return err
		}
	}
	return nil
}

func (x *exporter) shell(p, name string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return x.copyWithin(name, fi.Size(), f, x.budget)
}

// shellRecord starts recording a terminal session that asks for it: the
// request's stdin and stdout are teed into the record. A nil recorder
// (no record asked) does nothing.
func (r *Runner) shellRecord(m *execMeta, req *ExecRequest) (*shellRecorder, error) {
	if !req.Record {
		return nil, nil
	}
	if !req.TTY || req.Background {
		return nil, fmt.Errorf("a shell record needs a terminal session in the foreground: %w", ErrInvalid)
	}
	rec, err := r.openShellRecord(ShellStart{Sandbox: m.sandbox, Exec: m.id, Principal: req.Principal, Argv: m.argv,
		Rows: req.Rows, Cols: req.Cols})
	if err != nil {
		return nil, err
	}
	m.record = rec.name
	if req.Stdin != nil {
		req.Stdin = io.TeeReader(req.Stdin, rec.typed())
	}
	out := rec.shown()
	if req.Stdout != nil {
		out = io.MultiWriter(&discardErr{w: req.Stdout}, out)
	}
	req.Stdout = out
	return rec, nil
}

// finish closes the record. A record that cannot be written never fails
// the session it records.
func (s *shellRecorder) finish(exit int) {
	if s == nil {
		return
	}
	_ = s.close(exit)
}
