// Package agentwire is the wire protocol between the appliance and
// airlock-init, the agent that runs as PID 1 in every sandbox.
//
// A connection carries one request at a time. Every message is a frame:
//
//	[u32 big-endian length of type+payload][u8 type][payload]
//
// A request is one TRequest frame (JSON, Request, with V = Version). Stdin,
// file contents and output follow as raw data frames; every request ends
// with exactly one TResult frame (JSON, Result). Frames are at most
// MaxFrame bytes, so a reader never allocates more than that for one frame.
// Everything the agent sends is untrusted input to the appliance, and
// everything the appliance sends is checked by the agent as well: both ends
// decode through this package.
package agentwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version a Request carries.
const Version = 1

// ShimName is the command supervisors' argv[0], and the file the runner
// installs beside airlock-init for PID 1 to start them from (an
// execute-only copy: runner.installAgent).
const ShimName = "airlock-init-shim"

// SocketName is the abstract unix socket the agent listens on, in the
// sandbox's own network namespace ("@" is the abstract namespace).
const SocketName = "@airlock-agent"

// MaxFrame bounds the type byte plus payload of one frame.
const MaxFrame = 1<<20 + 1

// MaxData is the largest data payload a writer puts in one frame.
const MaxData = MaxFrame - 1

// Type is a frame's type.
type Type uint8

// Frame types.
const (
	TRequest  Type = 1  // host -> agent: JSON Request
	TStdin    Type = 2  // host -> agent: stdin bytes
	TStdinEOF Type = 3  // host -> agent: stdin closed (empty payload)
	TStdout   Type = 4  // agent -> host: stdout bytes (or the PTY's output)
	TStderr   Type = 5  // agent -> host: stderr bytes
	TData     Type = 6  // either way: file contents
	TDataEnd  Type = 7  // either way: end of file contents (empty payload)
	TResult   Type = 8  // agent -> host: JSON Result, ends the request
	TStarted  Type = 9  // agent -> host: JSON Started, the process runs
	TResize   Type = 10 // host -> agent: JSON Resize of a PTY
	TDetach   Type = 11 // host -> agent: stop streaming, leave the process running
)

var typeNames = [...]string{TRequest: "request", TStdin: "stdin", TStdinEOF: "stdin-eof",
	TStdout: "stdout", TStderr: "stderr", TData: "data", TDataEnd: "data-end", TResult: "result",
	TStarted: "started", TResize: "resize", TDetach: "detach"}

func (t Type) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Valid reports whether t is a known frame type.
func (t Type) Valid() bool { return t >= TRequest && t <= TDetach }

// ErrFrame is wrapped by every framing error.
var ErrFrame = errors.New("bad frame")

// WriteFrame writes one frame. p longer than MaxData is an error, not a
// split: callers chunk data themselves.
func WriteFrame(w io.Writer, t Type, p []byte) error {
	if len(p) > MaxData {
		return fmt.Errorf("write %s frame: payload %d bytes exceeds %d: %w", t, len(p), MaxData, ErrFrame)
	}
	var hdr [5]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(p)+1))
	hdr[4] = byte(t)
	if len(p) <= 4096 { // one write: small frames stay one segment
		buf := make([]byte, 0, 5+len(p))
		_, err := w.Write(append(append(buf, hdr[:]...), p...))
		return err
	}
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(p)
	return err
}

// Reader reads frames, reusing one buffer: a payload is valid until the
// next call to Next.
type Reader struct {
	r   io.Reader
	buf []byte
	n   int64 // frames read, for error positions
}

// NewReader returns a Reader on r that reads exactly each frame, so r
// can be read directly between frames.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// NewBufferedReader returns a Reader on a connection read only through it:
// a frame that arrives whole costs one read, not three (length, type,
// payload).
func NewBufferedReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 4096)} }

// Next reads one frame. io.EOF means the peer closed between frames; a
// close inside a frame is io.ErrUnexpectedEOF.
func (fr *Reader) Next() (Type, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(fr.r, hdr[:4]); err != nil {
		return 0, nil, err
	}
	fr.n++
	n := binary.BigEndian.Uint32(hdr[:4])
	if n == 0 {
		return 0, nil, fmt.Errorf("frame %d: length 0 (no type byte): %w", fr.n, ErrFrame)
	}
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("frame %d: length %d exceeds %d: %w", fr.n, n, MaxFrame, ErrFrame)
	}
	if _, err := io.ReadFull(fr.r, hdr[4:]); err != nil {
		return 0, nil, unexpected(err)
	}
	t := Type(hdr[4])
	if !t.Valid() {
		return 0, nil, fmt.Errorf("frame %d: unknown type %d: %w", fr.n, hdr[4], ErrFrame)
	}
	size := int(n - 1)
	if cap(fr.buf) < size {
		fr.buf = make([]byte, size, max(size, 4096))
	}
	p := fr.buf[:size]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		return 0, nil, unexpected(err)
	}
	if (t == TStdinEOF || t == TDataEnd || t == TDetach) && size != 0 {
		return 0, nil, fmt.Errorf("frame %d: %s frame carries %d bytes, want none: %w", fr.n, t, size, ErrFrame)
	}
	return t, p, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
