// Package h1 is the proxy's HTTP/1.1: a strict request parser, the
// response writer for HTTP/1.1 clients, and a client for bodiless
// upstream requests with its own connection pool.
//
// ReadRequest checks a request head strictly (CRLF only, no obs-fold, no
// control bytes, one Content-Length of digits or a single "chunked",
// never both, one Host) so that no request the proxy forwards can be
// framed two ways (request smuggling); what it accepts, it builds exactly
// as net/http would (FuzzReadRequest checks that). The request, its head
// and storage the caller names (Head's Slot) are one allocation.
//
// Writer is the http.ResponseWriter for an HTTP/1.1 client: framing is
// explicit and decided once, at WriteHeader; a body of known length is
// read straight into the connection's buffer, a long one sent in writes
// of several TLS records (rawio.ClientConn batches them).
//
// Pool sends GET and HEAD requests (Direct) over pooled connections from
// the goroutine serving the client, without net/http's transport
// goroutines, reading the common response heads in one pass
// (FuzzQuickResponse checks them against net/http). It dials only
// through its owner's Dial, with the checked addresses of each request.
package h1
