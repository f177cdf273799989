package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// sink is where the stream writes lines. write returns how many whole lines
// it wrote; after an error, a retry with the rest must be safe (no partial
// line is left behind).
type sink interface {
	write(lines []line) (int, error)
	close() error
}

// writerSink streams to an io.Writer (stdout). A short write is resumed
// from where it stopped.
type writerSink struct {
	w       io.Writer
	pending []byte // the unwritten tail of a line after a short write
	buf     []byte // reused between writes
}

func (s *writerSink) write(lines []line) (int, error) {
	done := 0
	for done < len(lines) {
		n, err := s.writeChunk(lines[done:])
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// writeChunk writes the lines that fit in streamChunk (at least one).
func (s *writerSink) writeChunk(lines []line) (int, error) {
	if len(s.pending) > 0 {
		n, err := s.w.Write(s.pending)
		s.pending = s.pending[n:]
		if err != nil {
			return 0, err
		}
	}
	buf := s.buf[:0]
	count := 0
	for _, l := range lines {
		if len(buf) > 0 && len(buf)+len(l.out())+1 > streamChunk {
			break
		}
		buf = append(append(buf, l.out()...), '\n')
		count++
	}
	s.buf = keepBuf(buf)
	n, err := s.w.Write(buf)
	if err == nil {
		return count, nil
	}
	done := bytes.Count(buf[:n], []byte("\n"))
	if i := bytes.LastIndexByte(buf[:n], '\n'); n > i+1 {
		// A line was cut: keep its unwritten tail and count it as written.
		s.pending = append([]byte(nil), buf[n:bytes.IndexByte(buf[n:], '\n')+n+1]...)
		done++
	}
	return done, err
}

func (s *writerSink) close() error { return nil }

// fileSink streams to a file rotated by size: path, path.1 (newest) ...
// path.N. A failed write is truncated away so no partial line stays.
type fileSink struct {
	path     string
	maxBytes int64
	maxFiles int
	f        *os.File
	size     int64
	buf      []byte // reused between writes
	// reopen asks the next write to close the file and open path afresh:
	// a log rotator renamed it (Pipeline.ReopenStream, SIGUSR1).
	reopen atomic.Bool
}

// maxKeptBuf bounds the write buffer a sink keeps between batches.
const maxKeptBuf = 8 << 20

func keepBuf(b []byte) []byte {
	if cap(b) > maxKeptBuf {
		return nil
	}
	return b[:0]
}

// openFileSink opens path for appending and returns the last whole record
// already in it (or in path.1), to continue the chain. A partial last line
// (a crash mid-write) is cut off.
func openFileSink(path string, maxBytes int64, maxFiles int) (*fileSink, []byte, error) {
	s := &fileSink{path: path, maxBytes: maxBytes, maxFiles: maxFiles}
	if err := s.open(); err != nil {
		return nil, nil, err
	}
	last, err := lastLine(s.f, &s.size)
	if err != nil {
		s.f.Close()
		return nil, nil, err
	}
	if last == nil && s.size == 0 {
		if f, err := openRegular(path + ".1"); err == nil {
			var sz int64
			last, _ = lastLine(f, &sz)
			f.Close()
		}
	}
	return s, last, nil
}

// openRegular opens path for reading if it is a regular file, without
// blocking on a FIFO.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("audit: %s is not a regular file", path)
	}
	return f, nil
}

func (s *fileSink) open() error {
	// Non-blocking: a FIFO in its place must not hang the start (its last
	// line is read back below); only a regular file is accepted.
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|syscall.O_NONBLOCK, 0o640)
	if err != nil {
		return fmt.Errorf("audit: open stream: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit: open stream: %w", err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return fmt.Errorf("audit: stream %s is not a regular file (%s)", s.path, st.Mode().Type())
	}
	s.f, s.size = f, st.Size()
	return nil
}

// lastLine reads the last complete line of f; it truncates an incomplete
// tail and updates *size.
func lastLine(f *os.File, size *int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	end := st.Size()
	const chunk = 1 << 20
	start := max(0, end-chunk)
	buf := make([]byte, end-start)
	if _, err := f.ReadAt(buf, start); err != nil && err != io.EOF {
		return nil, fmt.Errorf("audit: read stream tail: %w", err)
	}
	cut := bytes.LastIndexByte(buf, '\n')
	if int64(cut+1) != int64(len(buf)) && (cut >= 0 || start == 0) {
		// An incomplete last line: drop it so the next record starts clean.
		keep := start + int64(cut+1)
		if err := f.Truncate(keep); err != nil {
			return nil, fmt.Errorf("audit: cut partial stream record: %w", err)
		}
		end, buf = keep, buf[:cut+1]
	}
	*size = end
	if len(buf) == 0 {
		return nil, nil
	}
	buf = buf[:len(buf)-1]
	return bytes.Clone(buf[bytes.LastIndexByte(buf, '\n')+1:]), nil
}

// streamChunk is the most a sink writes in one system call: a sink that
// catches up on many batches reuses one buffer of this size instead of
// building the whole run in memory.
const streamChunk = 1 << 20

func (s *fileSink) write(lines []line) (int, error) {
	if s.reopen.Swap(false) {
		if err := s.reopenFile(); err != nil {
			s.reopen.Store(true) // retried with the batch
			return 0, err
		}
	}
	done := 0
	for done < len(lines) {
		if s.maxBytes > 0 && s.size > 0 && s.size+int64(len(lines[done].out())+1) > s.maxBytes {
			if err := s.rotate(); err != nil {
				return done, err
			}
		}
		buf := s.buf[:0]
		n := done
		for n < len(lines) {
			l := lines[n].out()
			if len(buf) > 0 && (len(buf)+len(l)+1 > streamChunk ||
				s.maxBytes > 0 && s.size+int64(len(buf)+len(l)+1) > s.maxBytes) {
				break
			}
			buf = append(append(buf, l...), '\n')
			n++
		}
		s.buf = keepBuf(buf)
		if _, err := s.f.WriteAt(buf, s.size); err != nil {
			// Remove whatever part of buf reached the file.
			terr := s.f.Truncate(s.size)
			return done, errors.Join(fmt.Errorf("audit: write stream: %w", err), terr)
		}
		s.size += int64(len(buf))
		done = n
	}
	return done, nil
}

func (s *fileSink) rotate() error {
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("audit: rotate stream: %w", err)
	}
	keep := max(s.maxFiles, 1)
	os.Remove(s.path + "." + strconv.Itoa(keep))
	for i := keep - 1; i >= 1; i-- {
		os.Rename(s.path+"."+strconv.Itoa(i), s.path+"."+strconv.Itoa(i+1))
	}
	if err := os.Rename(s.path, s.path+".1"); err != nil {
		return fmt.Errorf("audit: rotate stream: %w", err)
	}
	return s.open()
}

// reopenFile opens path again, a new file if a rotator moved the old one
// away (the chain goes on: the sequencer is the pipeline's, not the file's).
func (s *fileSink) reopenFile() error {
	old := s.f
	if err := s.open(); err != nil {
		return fmt.Errorf("audit: reopen stream: %w", err)
	}
	return old.Close()
}

func (s *fileSink) close() error { return s.f.Close() }

// JSONL is a synchronous Emitter that writes each event as one chained JSON
// line (with seq and prev_hash, the same records as the pipeline's stream)
// to a writer. It suits tests and small tools; the appliance uses Pipeline.
type JSONL struct {
	mu  sync.Mutex
	seq *sequencer
	out sink
	err error
}

var _ Emitter = (*JSONL)(nil)

// NewJSONL returns an Emitter writing JSON Lines to w, starting a new chain.
func NewJSONL(w io.Writer) *JSONL {
	return &JSONL{seq: newSequencer(), out: &writerSink{w: w}}
}

// Emit encodes and writes e. The first error is kept (see Err).
func (j *JSONL) Emit(e Event) {
	r, err := encode(e)
	j.mu.Lock()
	defer j.mu.Unlock()
	if err == nil {
		var l line
		if l, err = j.seq.next(r); err == nil {
			_, err = j.out.write([]line{l})
		}
	}
	if err != nil && j.err == nil {
		j.err = err
	}
}

// Err returns the first encoding or write error, if any.
func (j *JSONL) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}
