// Package rawio is the proxy's socket I/O below net.Conn: raw reads and
// writes on non-blocking descriptors, and the connections under an
// inspected tunnel's two tls.Conns.
//
// Read and Write (and the relay's own calls) are made as raw system
// calls: every descriptor they are used on is O_NONBLOCK, so none waits
// in the kernel, and without the scheduler's entersyscall and
// exitsyscall a call the kernel spends a while in (a loopback write
// delivers to the receiving socket in the writer's context) does not have
// sysmon hand the goroutine's P to another thread. Each returns a count
// that is never negative and an error that is nil or a unix.Errno.
//
// Socket reads and writes a net.TCPConn's socket that way through its
// RawConn, with Go's poller still waiting for readiness and keeping
// deadlines. ClientConn, under the client's tls.Conn, gathers the records
// of one large write into one system call; BulkConn, under an upstream's,
// reads in large pieces while bytes stream and sends a request from inside
// the read that waits for its answer. LazyDeadline pushes deadlines back
// a few times per period instead of on every read or write.
package rawio
