package agent

import "net"

// RawConn dials the agent past the client's own checks, for tests that
// send it bad input.
func RawConn(c *Client) (net.Conn, error) { return c.t.dial() }
