// Package proxy is Airlock's egress proxy: explicit (HTTP_PROXY, CONNECT)
// and transparent listeners, per-connection and per-request policy
// decisions, TLS inspection with the appliance CA or byte splicing,
// credential injection, and the flow and request events reviewers read.
//
// Every connection is attributed to a sandbox by its source address, every
// decision is made by the sandbox's policy, every upstream connection is
// dialed to the exact address that was resolved and checked, and every
// denial is an audit event naming the rule.
//
// # One connection's story
//
// The files of this package follow a connection in order:
//
//   - proxy.go: Config, the consumer-side interfaces (Decider,
//     Identifier, Resolver, Secrets, Approver, ...), Proxy and its
//     lifecycle. listen.go: the accept loops.
//   - flow.go: the flow, one connection's state, its rule names and its
//     decision and close events. conn.go: a connection from accept to
//     close: identity, loop check, explicit or transparent, CONNECT, the
//     flow decision and the deny sequences.
//   - sniff.go, clienthello.go: what the client speaks (TLS ClientHello,
//     HTTP/1 request line, other) and its SNI and ALPN.
//   - dial.go: resolve once, ask the policy's Reach for every answer,
//     dial only the checked addresses; the loop check.
//   - mitm.go: TLS inspection (a leaf for the approved name). tunnel.go:
//     splicing, the relay or a copy both ways. redecide.go: live tunnels
//     re-decided and closed on a policy reload.
//   - h1serve.go, h2.go: the requests of one HTTP/1.x or HTTP/2
//     connection, each handed to the engine.
//   - engine.go: the per-request pipeline on goproxy (see below).
//     http.go: the request's scope, target, event and upstream form;
//     facts.go: what the policy decides on beyond the request line;
//     connhdr.go: Connection headers that may not remove guarded fields;
//     limits.go: rate and body limits; approve.go: a request held for a
//     human; inject.go: placeholders swapped and credentials injected;
//     inject_body.go: a streamed request body searched for placeholders;
//     reflect.go, reflect_match.go: responses scanned for an injected
//     secret; reject.go: the one place a verdict becomes an HTTP
//     refusal; upstream.go: the sandbox's upstream, h1.Pool or
//     net/http's Transport; bodies.go: request body wrappers.
//
// # What goproxy does
//
// Every forwarded request, plain or inspected, HTTP/1.1 or HTTP/2, goes
// through one goproxy.ProxyHttpServer (newEngine). goproxy runs the
// request handlers in order and stops at the first that answers (Airlock
// registers one, serveRequest: target, decide, limit, prepare), sends the
// prepared request through the request's RoundTripper (exch.RoundTrip,
// the sandbox's upstream), runs the response handlers on every response,
// refusals included (Airlock's respond: hop-by-hop headers, upgrades,
// reflected secrets), and writes the response to the client: the header
// fields, Content-Length dropped when a handler replaced the body,
// trailers, a flush per write of a chunked or event-stream body, and the
// WebSocket relay after a 101. It never sees CONNECT, never dials, and
// its MITM machinery and CA are never used.
//
// # Mechanism
//
// The wire mechanics the performance targets need live in internal
// packages behind narrow APIs, with their own tests and fuzz targets:
//
//   - internal/h1: the strict HTTP/1.1 request parser (ReadRequest), the
//     client-facing response writer (Writer), and the HTTP/1.1 client
//     for bodiless upstream requests with its connection pool and fast
//     response parser (Pool).
//   - internal/relay: the epoll relays that move spliced tunnels with
//     splice(2) and non-blocking raw system calls.
//   - internal/rawio: raw socket I/O without the scheduler's syscall
//     hand-off (Socket), TLS record batching under the client's tls.Conn
//     (ClientConn), large reads under an upstream's (BulkConn), and the
//     raw read and write the relay uses too.
package proxy
