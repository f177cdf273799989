package agent_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/internal/agentwire"
	"airlock/runner/agent"
)

func TestFilesRoundTrip(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	data := bytes.Repeat([]byte{0, 0xff, 'a'}, 400000)
	fi, err := c.WriteFile(ctx(t), "/tmp/d/x.bin", 0o600, int64(len(data)), 0, bytes.NewReader(data))
	if !agent.IsRemote(err, agentwire.CodeNotFound) {
		t.Fatalf("write into a missing dir: %v %+v", err, fi)
	}
	if _, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpMkdir, Path: "/tmp/d/e", Parents: true}); err != nil {
		t.Fatal(err)
	}
	fi, err = c.WriteFile(ctx(t), "/tmp/d/x.bin", 0o600, int64(len(data)), 0, bytes.NewReader(data))
	if err != nil || fi.Size != int64(len(data)) || fi.Mode != 0o600 || fi.Type != "file" {
		t.Fatalf("write: %+v %v", fi, err)
	}
	var got bytes.Buffer
	if _, err := c.ReadFile(ctx(t), "/tmp/d/x.bin", 0, &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("read back: %v (%d bytes)", err, got.Len())
	}
	ls, err := c.List(ctx(t), "/tmp/d", 0)
	if err != nil || len(ls) != 2 {
		t.Fatalf("list: %+v %v", ls, err)
	}
	if _, err := c.ReadFile(ctx(t), "/tmp/d/x.bin", 1000, &got); !agent.IsRemote(err, agentwire.CodeTooLarge) {
		t.Fatalf("read over the limit: %v", err)
	}
	if _, err := c.WriteFile(ctx(t), "/tmp/d/y", 0, 2000, 1000, bytes.NewReader(make([]byte, 2000))); !agent.IsRemote(err, agentwire.CodeTooLarge) {
		t.Fatalf("write over the limit: %v", err)
	}
	// The connection stays usable after a refused write (its data was read).
	if _, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpRemove, Path: "/tmp/d", Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpStat, Path: "/tmp/d"}); !agent.IsRemote(err, agentwire.CodeNotFound) {
		t.Fatalf("stat after remove: %v", err)
	}
	// Read-only root: a write outside the tmpfs mounts is refused with the reason.
	if _, err := c.WriteFile(ctx(t), "/etc/x", 0, 1, 0, strings.NewReader("x")); !agent.IsRemote(err, agentwire.CodeDenied) {
		t.Fatalf("write on the read-only root: %v", err)
	}
}

// TestListLargeDirectory: a directory of 20,000 entries (about 2.4 MB of
// entries, more than one 1 MiB frame) lists whole; a bound below its size
// is refused, and the connection stays usable.
func TestListLargeDirectory(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	e, _, errs := run(t, c, agentwire.Request{ID: "many", Shell: `mkdir /tmp/many && cd /tmp/many && i=0; while [ $i -lt 20000 ]; do : > "file-with-a-longish-name-$i"; i=$((i+1)); done`}, "")
	if e.Code != 0 {
		t.Fatal(errs)
	}
	ls, err := c.List(ctx(t), "/tmp/many", 0)
	if err != nil {
		t.Fatalf("list 20000 entries: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range ls {
		seen[f.Name] = true
	}
	if len(ls) != 20000 || len(seen) != 20000 || !seen["file-with-a-longish-name-19999"] {
		t.Fatalf("listed %d entries (%d distinct), want 20000", len(ls), len(seen))
	}
	if _, err := c.List(ctx(t), "/tmp/many", 100); !agent.IsRemote(err, agentwire.CodeTooLarge) {
		t.Fatalf("list over its bound: %v, want toolarge", err)
	}
	if _, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpStat, Path: "/tmp/many"}); err != nil {
		t.Fatalf("stat after the listings: %v", err)
	}
}

// Paths resolve inside the sandbox: "..", absolute symlinks to host paths
// and symlinks through /proc stay in it; procfs and sysfs are not served.
func TestFilesPathConfinement(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	e, _, errs := run(t, c, agentwire.Request{ID: "links", Shell: `mkdir -p /tmp/h && echo sandbox > /tmp/h/marker &&
ln -s /tmp/h/marker /tmp/abs && ln -s / /tmp/root && ln -s /proc/1/root /tmp/p1 && ln -s ../../../../../../etc/hostname /tmp/up`}, "")
	if e.Code != 0 {
		t.Fatal(errs)
	}
	read := func(p string) (string, error) {
		var b bytes.Buffer
		_, err := c.ReadFile(ctx(t), p, 0, &b)
		return b.String(), err
	}
	// A host file the sandbox does not have: never served.
	for _, p := range []string{"/../../../../etc/airlock-host-only", "/tmp/root/../etc/airlock-host-only"} {
		if _, err := read(p); !agent.IsRemote(err, agentwire.CodeNotFound) {
			t.Errorf("%s: %v, want not found", p, err)
		}
	}
	if s, err := read("/tmp/abs"); err != nil || s != "sandbox\n" {
		t.Errorf("absolute symlink: %q %v", s, err)
	}
	host, _ := read("/tmp/up")
	if !strings.HasPrefix(host, "sandbox-") && host == "" {
		t.Errorf("relative symlink escaping upward resolved to %q", host)
	}
	for _, p := range []string{"/proc/1/environ", "/proc/self/status", "/tmp/p1/etc/hostname", "/sys/kernel/uevent_seqnum"} {
		if _, err := read(p); err == nil {
			t.Errorf("%s: served", p)
		} else if !agent.IsRemote(err, agentwire.CodeDenied) && !agent.IsRemote(err, agentwire.CodeInvalid) {
			t.Errorf("%s: %v, want denied", p, err)
		}
	}
	if _, err := c.WriteFile(ctx(t), "/proc/self/attr/current", 0, 1, 0, strings.NewReader("x")); err == nil {
		t.Error("write into /proc served")
	}
	if _, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpRemove, Path: "/tmp/root", Recursive: true}); err != nil {
		t.Fatal(err) // removes the link, not what it points to
	}
	if s, err := read("/tmp/h/marker"); err != nil || s != "sandbox\n" {
		t.Fatalf("removing a symlink to / touched its target: %q %v", s, err)
	}
}

// Bad input gets a precise error, no panic, and the agent goes on serving.
func TestBadInput(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	for _, tc := range []struct {
		req  agentwire.Request
		want string
	}{
		{agentwire.Request{Op: agentwire.OpExec, ID: "x"}, "empty argv"},
		{agentwire.Request{Op: agentwire.OpExec, ID: "x", Argv: []string{"true"}, Env: []string{"A B"}}, "is not KEY=VALUE"},
		{agentwire.Request{Op: agentwire.OpExec, ID: "x", Argv: []string{"true", strings.Repeat("a", 200000)}}, "argv[1]: 200000 bytes"},
		{agentwire.Request{Op: agentwire.OpSignal, ID: "x", Signal: "SIGFOO"}, `unknown signal "SIGFOO"`},
		{agentwire.Request{Op: agentwire.OpExec, ID: "x", Argv: []string{"true"}, User: "nosuchuser"}, "no such user"},
	} {
		var err error
		if tc.req.Op == agentwire.OpExec {
			_, err = c.Exec(ctx(t), tc.req, agent.Streams{}, nil)
		} else {
			_, err = c.Do(ctx(t), tc.req)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.req, err, tc.want)
		}
	}
	// The agent checks on its own: raw requests past the client.
	raw, err := agent.RawConn(c)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { raw.Close() }()
	rd := agentwire.NewReader(raw)
	for in, want := range map[string]string{
		`{"v":1,"op":"write","path":"/tmp/x","size":-1}`:         "negative size -1",
		`{"v":1,"op":"exec","id":"x","argv":[]}`:                 "empty argv",
		`{"v":1,"op":"exec","id":"x","argv":["a"],"env":["=1"]}`: "empty variable name",
		`{"v":1,"op":"signal","id":"x","signal":"NOPE"}`:         `unknown signal "NOPE"`,
		`{"v":9,"op":"ps"}`:              "protocol version 9",
		`{"v":1,"op":"ps","extra":true}`: `unknown field "extra"`,
		`not json`:                       "invalid character",
	} {
		if err := agentwire.WriteFrame(raw, agentwire.TRequest, []byte(in)); err != nil {
			t.Fatal(err)
		}
		ty, p, err := rd.Next()
		if err != nil || ty != agentwire.TResult {
			t.Fatalf("%s: %v %v", in, ty, err)
		}
		res, _ := agentwire.DecodeResult(p)
		if res == nil || !strings.Contains(res.Error, want) || res.Code != agentwire.CodeInvalid {
			t.Errorf("%s: %+v, want %q", in, res, want)
		}
		if strings.Contains(in, "write") || in == "not json" {
			raw.Close() // the agent ends a connection whose data may follow
			if raw, err = agent.RawConn(c); err != nil {
				t.Fatal(err)
			}
			rd = agentwire.NewReader(raw)
		}
	}
	// A frame length over the bound is answered and the connection ended.
	raw.Write([]byte{0x7f, 0xff, 0xff, 0xff, 1})
	if ty, p, err := rd.Next(); err != nil || ty != agentwire.TResult || !strings.Contains(string(p), "exceeds") {
		t.Fatalf("huge frame: %v %s %v", ty, p, err)
	}
	e, out, _ := run(t, c, agentwire.Request{ID: "alive", Argv: []string{"echo", "ok"}}, "")
	if e.Code != 0 || out != "ok\n" {
		t.Fatalf("after bad input: %+v %q", e, out)
	}
}

// The agent maps a sandbox socket's local port to the process and command
// that hold it (for flow attribution).
func TestSockOwner(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	var st agentwire.Started
	if _, err := c.Exec(ctx(t), agentwire.Request{ID: "listener", Background: true, Shell: "exec nc -l -p 4321"},
		agent.Streams{}, func(s agentwire.Started) { st = s }); err != nil {
		t.Fatal(err)
	}
	var res *agentwire.Result
	var err error
	for range 100 {
		if res, err = c.Do(ctx(t), agentwire.Request{Op: agentwire.OpSockOwner, Proto: "tcp", Port: 4321}); err == nil {
			break
		}
	}
	if err != nil || res.Sock.Pid != st.Pid || res.Sock.ExecID != "listener" || res.Sock.Inode == 0 {
		t.Fatalf("sockowner: %+v %v (started %+v)", res, err, st)
	}
	if _, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpSockOwner, Proto: "udp", Port: 4321}); !agent.IsRemote(err, agentwire.CodeNotFound) {
		t.Fatalf("no udp socket: %v", err)
	}
}

// TestSockOwnerExact: given the socket's four-tuple, the agent finds a
// TCP client socket (one sock_diag lookup), with the process's pid, name
// and command; a socket already gone is put on the only command running
// at the time (inferred), and on none when several ran.
func TestSockOwnerExact(t *testing.T) {
	_, pid := sandbox(t, defaultCaps)
	c := client(t, pid)
	start := func(id, shell string) {
		if _, err := c.Exec(ctx(t), agentwire.Request{ID: id, Background: true, Shell: shell}, agent.Streams{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	start("solo", "exec sleep 30")
	res, err := c.Do(ctx(t), agentwire.Request{Op: agentwire.OpSockOwner, Proto: "udp", Port: 9,
		Local: "127.0.0.1", Remote: "127.0.0.1:53", AtNS: time.Now().UnixNano()})
	if err != nil || !res.Sock.Inferred || res.Sock.ExecID != "solo" || res.Sock.Pid != 0 {
		t.Fatalf("a gone socket with one command running: %+v %v, want inferred solo", res, err)
	}
	start("listener", "sleep 30 | nc -l -p 4321")
	time.Sleep(300 * time.Millisecond)
	start("tcp-client", "sleep 30 | nc 127.0.0.1 4321")
	// The client's port: the connection to 4321 (10E1) that is not the
	// listener's accepted end.
	var port int64
	for range 50 {
		e, out, _ := run(t, c, agentwire.Request{ID: fmt.Sprintf("netstat-%d", time.Now().UnixNano()), Shell: "cat /proc/net/tcp"}, "")
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if e.Code == 0 && len(f) > 3 && f[3] == "01" && strings.HasSuffix(f[2], ":10E1") {
				_, hexPort, _ := strings.Cut(f[1], ":")
				port, _ = strconv.ParseInt(hexPort, 16, 32)
			}
		}
		if port != 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if port == 0 {
		_, out, _ := run(t, c, agentwire.Request{ID: "netstat-last", Shell: "cat /proc/net/tcp; ps"}, "")
		t.Fatalf("the client's connection did not show in /proc/net/tcp:\n%s", out)
	}
	res, err = c.Do(ctx(t), agentwire.Request{Op: agentwire.OpSockOwner, Proto: "tcp", Port: int(port), Local: "127.0.0.1", Remote: "127.0.0.1:4321"})
	if err != nil || res.Sock.ExecID != "tcp-client" || res.Sock.Pid == 0 || res.Sock.Comm != "nc" || res.Sock.Inode == 0 || res.Sock.Inferred {
		t.Errorf("tcp %d -> 127.0.0.1:4321: %+v %v, want nc of tcp-client", port, res, err)
	}
	_, err = c.Do(ctx(t), agentwire.Request{Op: agentwire.OpSockOwner, Proto: "udp", Port: 9,
		Local: "127.0.0.1", Remote: "127.0.0.1:53", AtNS: time.Now().UnixNano()})
	if !agent.IsRemote(err, agentwire.CodeNotFound) {
		t.Fatalf("a gone socket with several commands running: %v, want not found", err)
	}
}
