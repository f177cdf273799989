package proxy

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"airlock/proxy/internal/h1"
)

// unwrapper is a body wrapper that can give back what it wraps.
type unwrapper interface{ unwrap() io.ReadCloser }

func unwrapBody(rc io.ReadCloser) io.ReadCloser {
	for {
		u, ok := rc.(unwrapper)
		if !ok {
			return rc
		}
		rc = u.unwrap()
	}
}

// deadlineBody gives every read of a request body a deadline.
type deadlineBody struct {
	rc io.ReadCloser
	c  net.Conn
	d  time.Duration
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	b.c.SetReadDeadline(time.Now().Add(b.d))
	return b.rc.Read(p)
}
func (b *deadlineBody) Close() error          { return b.rc.Close() }
func (b *deadlineBody) unwrap() io.ReadCloser { return b.rc }

// continueBody sends "100 Continue" to the client on the first read: the
// body is only read once the request was allowed.
type continueBody struct {
	rc   io.ReadCloser
	w    io.Writer
	once sync.Once
}

func (b *continueBody) Read(p []byte) (int, error) {
	var err error
	b.once.Do(func() { _, err = io.WriteString(b.w, "HTTP/1.1 100 Continue\r\n\r\n") })
	if err != nil {
		return 0, err
	}
	return b.rc.Read(p)
}
func (b *continueBody) Close() error          { return b.rc.Close() }
func (b *continueBody) unwrap() io.ReadCloser { return b.rc }

// signalBody reports when the upstream transport is done with a request
// body (it closes it, possibly after RoundTrip returned), so the
// connection's reader is never used by two goroutines at once.
type signalBody struct {
	rc     io.ReadCloser
	closed chan struct{}
	once   sync.Once
}

func (b *signalBody) Read(p []byte) (int, error) { return b.rc.Read(p) }
func (b *signalBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}
func (b *signalBody) unwrap() io.ReadCloser { return b.rc }

// wait returns true once the body is complete or its user closed it; false
// if neither happens within d.
func (b *signalBody) wait(inner io.ReadCloser, d time.Duration) bool {
	if inner == nil || inner == http.NoBody {
		return true
	}
	if h1.Done(inner) {
		select {
		case <-b.closed:
		default:
			// Fully read; the transport may still hold it but never reads
			// past the end.
		}
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.closed:
		return true
	case <-t.C:
		return false
	}
}
