// Package upstream is dnsd's one mechanism for UDP queries to upstream
// resolvers, and with it the defence against off-path spoofing of their
// answers.
//
// Each upstream address has Slots connected UDP sockets (Socks). Every
// query takes one of them at random and a random ID that no other query
// pending on that socket has; a socket carries at most MaxUses queries
// and is then replaced by a new one on a new random ephemeral port (Linux
// randomizes the port of an implicitly bound socket). So a query's source
// port is one of few open at a time, random per query, and changing all
// the time: a spoofer must hit the port (about 15 bits of the ephemeral
// range, less the few open) and the 16-bit ID, and a port learned from
// one query is good for at most MaxUses-1 others. Answers are matched
// strictly: the connected socket only receives datagrams from the
// upstream's address and port, and the answer must carry the ID of a
// query pending on that socket, the response bit, and that query's one
// question (name, case aside, type and class). Anything else (a spoof,
// garbage, a late answer) is read past. Check applies the same rule to
// answers that come another way (TCP, DNS over TLS).
//
// Every socket has a reader goroutine that reads answers in small
// batches (recvmmsg) and hands each matched one to whoever waits for it.
// A query waits in one of two ways:
//
//   - Register, then a Sender: for a caller that must not block (dnsd's
//     UDP readers). The query is pending with a value W of the caller's;
//     the Sender sends the queries of a read batch in one sendmmsg per
//     socket; the Pool's Handler later gets W back exactly once: with
//     its answer (Answered, on the socket's reader goroutine, a batch at
//     a time) or with an error (Failed: the deadline passed, the send
//     failed, the pool closed).
//   - Exchange: for a goroutine that may block (retries, TCP clients).
//
// Deadlines of pending queries are enforced by one sweeper per Pool,
// which ticks every few milliseconds while any query is pending.
package upstream
