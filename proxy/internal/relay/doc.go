// Package relay moves the bytes of spliced tunnels: TCP connections the
// proxy decided to pass through without looking at them.
//
// Bulk bytes go with splice(2) (socket to pipe to socket, no copy through
// user space), small messages with plain reads and writes, all from a few
// relays: goroutines, one per CPU, each owning an epoll set that holds
// both sockets of its tunnels (edge-triggered), not a goroutine per
// direction. A tunnel's sockets belong to its relay alone: Adopt takes a
// duplicate of each descriptor and closes the net.TCPConn, so the sockets
// leave Go's poller (whose epoll set would otherwise wake for every event
// the relay already serves). A socket is read once per readiness: a read
// that returns less than asked drained the socket, so the next read waits
// for the next edge instead of returning EAGAIN, and a message costs one
// read and one write. The epoll descriptor itself sits in Go's poller, so
// a relay with nothing to do parks like any goroutine waiting on a socket
// and wakes with the first event of any of its tunnels.
//
// A relay never blocks: every socket and pipe is non-blocking, and a
// destination whose send queue is full keeps its direction's bytes until
// its next write edge while the relay serves the other tunnels. A
// direction waits for readability holding neither a buffer nor a pipe (it
// borrows one from a pool once bytes are there and gives it back when they
// have moved): an idle tunnel costs its two sockets and a small record. A
// relay uses and closes its descriptors only under its mutex, so a tunnel
// ended from outside (a policy reload, the proxy closing: see Gate) has
// its sockets closed once and never used by number again; the relay
// closes both sockets when the tunnel ends, whatever the reason.
//
// The system calls are rawio's raw ones (see that package).
package relay
