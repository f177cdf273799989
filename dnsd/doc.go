// Package dnsd is Airlock's policy DNS resolver: every name a sandbox looks
// up is identified by source address, decided by the sandbox's policy,
// guarded against exfiltration, forwarded with a cache, filtered against
// rebinding, recorded in the bindings ledger and logged.
//
// One query's story is the handler chain (chain.go), one ordered slice of
// steps that every path enters with resume and that ends in writeAndLog:
//
//   - identify (chain.go): the sandbox behind the source address, and the
//     message's shape;
//   - policy (policy.go): the sandbox's Decide for the name and type;
//   - guards (guards.go): the exfiltration guards (lengths, rates, names
//     per parent), whose refusals are logged cut short (redact.go);
//   - cache (cache.go, wire.go): answers shaped for this policy, patched
//     and written from their packed form;
//   - forward (forward.go): upstreams in turn, with retries, TCP after a
//     truncation, DNS over TLS, identical queries coalesced; on a UDP
//     reader it waits instead of blocking, and the upstream socket's
//     reader resumes the query (upstream.go);
//   - filter (filter.go): answer addresses the policy's Reach refuses
//     stripped (the rebinding guard), each CNAME hop's verdict recorded
//     for the event (cname.go), the answer cached and its bindings
//     recorded (bindings.go).
//
// Around the chain: server.go owns the sockets and their lifetimes,
// config.go the Config and Upstream types, udp.go the IPv4 UDP reader
// (batched reads, a fast parser for plain queries in fastparse.go, answers
// without the network sent in batches, misses handed on), replies.go the
// one way answers leave in batches (the reader's and the upstream
// readers'), tcplimit.go the
// per-source cap on TCP connections (TCP is served by miekg/dns), noise.go
// the rate limit on logging refused junk, memo.go the memoised strings of
// events.
//
// The wire mechanics live in internal packages behind narrow APIs:
// internal/upstream is the one mechanism for UDP queries upstream
// (connected sockets, random source-port rotation, random IDs, strict
// answer matching), and internal/udpio the recvmmsg/sendmmsg batches and
// IP_PKTINFO control messages. The transparent sockets the kernel path
// steers queries to come from airlock/internal/tproxy.
package dnsd
