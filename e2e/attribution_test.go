package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/e2e/world"
)

// TestAttribution runs commands that make HTTPS, plain HTTP, raw TCP and
// DNS traffic in one Debian sandbox through a real appliance with the
// in-sandbox agent — short-lived processes, with a background command
// polling a host of its own all the while — and checks that at least
// 95 % of the flow, http and dns events name the command (exec id) that
// made them, and that a command's own connection and query carry its pid.
// It prints the coverage. The same appliance runs with
// sandbox.max_file_mb = 1: the files API holds to it.
func TestAttribution(t *testing.T) {
	requireAppliance(t)
	w := startWorld(t)
	a := startAgentAppliance(t, w, "attr", func(cfg string) string {
		return strings.Replace(cfg, "\nmax = 8\n", "\nmax = 2\nmax_file_mb = 1\n", 1)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sb, err := a.c.Create(ctx, client.CreateRequest{Image: debianImage, Policy: PolicyName})
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, a.tail(40))
	}
	t.Cleanup(func() { a.c.Delete(context.Background(), sb.ID) })
	t.Run("events name their command", func(t *testing.T) { attributionCoverage(t, ctx, a, w, sb.ID) })
	t.Run("files limit", func(t *testing.T) { filesLimit(t, ctx, a, sb.ID) })
}

// window is one foreground command's run as the test saw it.
type window struct {
	id         string
	pid        int
	start, end time.Time
}

func attributionCoverage(t *testing.T, ctx context.Context, a *sdkAppliance, w *world.World, sb string) {
	npm, pypi := w.Name(world.RoleNPM), w.Name(world.RolePyPI)
	from := time.Now()
	bg, err := a.c.Exec(ctx, sb, client.ExecRequest{Background: true,
		Shell: "for i in $(seq 60); do curl -s -o /dev/null https://" + pypi + "/simple/; sleep 0.2; done"}, io.Discard, io.Discard)
	if err != nil || bg.ID == "" {
		t.Fatalf("background command: %+v %v", bg, err)
	}
	var fg []window
	run := func(req client.ExecRequest) client.ExecResult {
		start := time.Now()
		res, err := a.c.Exec(ctx, sb, req, io.Discard, io.Discard)
		if err != nil {
			t.Fatalf("exec %v%s: %v", req.Argv, req.Shell, err)
		}
		fg = append(fg, window{res.ID, res.Pid, start, time.Now()})
		time.Sleep(700 * time.Millisecond) // commands apart: each event's time names one
		return res
	}
	// A command that is the process itself (no shell): a known query and a
	// known connection from a process that keeps both sockets open a while.
	own := run(client.ExecRequest{Argv: []string{"python3", "-c", knownTraffic, a.gateway.String(), w.Addr(world.RoleNPM).String()}})
	for round := range 4 {
		run(client.ExecRequest{Shell: "curl -sS -o /dev/null https://" + npm + "/airlock-demo"})
		run(client.ExecRequest{Shell: "curl -s -o /dev/null http://" + npm + "/airlock-demo; true"})
		run(client.ExecRequest{Shell: fmt.Sprintf("timeout 5 bash -c 'exec 3<>/dev/tcp/%s/443 && printf raw-%d >&3 && cat <&3 >/dev/null'; true", w.Addr(world.RoleNPM), round)})
		run(client.ExecRequest{Shell: fmt.Sprintf("getent ahosts nothing-%d.example.test; getent hosts %s; true", round, npm)})
	}
	time.Sleep(2 * time.Second) // the last close records
	var evs []audit.Event
	err = a.c.Logs(ctx, client.LogQuery{Sandbox: sb, Since: from}, func(e audit.Event) error {
		evs = append(evs, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cov := coverage{}
	for _, e := range evs {
		if e.Kind != audit.KindDNS && e.Kind != audit.KindFlow && e.Kind != audit.KindHTTP {
			continue
		}
		want := expectedExec(e, pypi, bg.ID, fg)
		cov.add(e, want)
	}
	t.Log(cov.String())
	t.Logf("misses:\n%s", cov.misses.String())
	defer func() {
		if !t.Failed() {
			return
		}
		for _, e := range evs {
			if e.Kind == audit.KindDNS {
				t.Logf("dns %s %s %s exec_id=%q pid=%d comm=%q attribution=%q", e.Time.Format("15:04:05.000"), e.DNS.QName, e.DNS.QType, e.ExecID, e.Pid, e.Comm, e.Attribution)
			}
		}
	}()
	fmt.Println("attribution coverage:", cov.String())
	if cov.total < 40 {
		t.Fatalf("only %d flow, http and dns events: the commands did not run as planned\n%s", cov.total, describe(evs))
	}
	if got := cov.ratio(); got < 0.95 {
		t.Errorf("%.1f %% of the events name the command that made them, want ≥ 95 %%; the others:\n%s", 100*got, cov.misses.String())
	}
	ownFlow, ownDNS := false, false
	for _, e := range evs {
		if e.ExecID == own.ID && e.Pid == own.Pid && e.Comm == "python3" && e.Attribution == audit.AttrSocket {
			ownFlow = ownFlow || e.Kind == audit.KindFlow && strings.HasSuffix(e.Flow.OrigDst, ":443")
			ownDNS = ownDNS || e.Kind == audit.KindDNS && e.DNS.QName == "known-query.example.test."
		}
	}
	if !ownFlow || !ownDNS {
		t.Errorf("python3 run as command %s (pid %d): its connection with its pid %v, its query with its pid %v", own.ID, own.Pid, ownFlow, ownDNS)
	}
}

// knownTraffic sends one DNS query (known-query.example.test, A) to the
// gateway and opens one TCP connection to port 443 of the address given,
// keeping both sockets open for a second.
const knownTraffic = `import socket, struct, sys, time
gw, dst = sys.argv[1], sys.argv[2]
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
for label in b"known-query.example.test".split(b"."):
    q += bytes([len(label)]) + label
q += b"\x00" + struct.pack(">HH", 1, 1)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
u.connect((gw, 53))
u.send(q)
u.recv(512)
t = socket.create_connection((dst, 443), timeout=5)
t.send(b"not tls")
time.sleep(1)
`

// expectedExec is the command that made e: the background command for its
// host, else the foreground command whose run covers e's time.
func expectedExec(e audit.Event, bgHost, bgID string, fg []window) string {
	if strings.Contains(strings.ToLower(audit.Host(&e)), bgHost) {
		return bgID
	}
	slack := 300 * time.Millisecond
	for _, w := range fg {
		if !e.Time.Before(w.start.Add(-slack)) && !e.Time.After(w.end.Add(slack)) {
			return w.id
		}
	}
	return ""
}

type coverage struct {
	total, right, socket, inferred int
	byKind                         map[audit.Kind][2]int
	misses                         bytes.Buffer
}

func (c *coverage) add(e audit.Event, want string) {
	if c.byKind == nil {
		c.byKind = map[audit.Kind][2]int{}
	}
	k := c.byKind[e.Kind]
	k[1]++
	c.total++
	if want != "" && e.ExecID == want {
		c.right++
		k[0]++
		if e.Attribution == audit.AttrInferred {
			c.inferred++
		} else {
			c.socket++
		}
	} else {
		fmt.Fprintf(&c.misses, "want %q: %s %s exec_id=%q pid=%d attribution=%q host=%s\n",
			want, e.Time.Format("15:04:05.000"), e.Kind, e.ExecID, e.Pid, e.Attribution, audit.Host(&e))
	}
	c.byKind[e.Kind] = k
}

func (c *coverage) ratio() float64 {
	if c.total == 0 {
		return 0
	}
	return float64(c.right) / float64(c.total)
}

func (c *coverage) String() string {
	s := fmt.Sprintf("%d/%d events (%.1f %%) name the right command: %d by their socket, %d inferred by the agent;",
		c.right, c.total, 100*c.ratio(), c.socket, c.inferred)
	for _, k := range []audit.Kind{audit.KindFlow, audit.KindHTTP, audit.KindDNS} {
		n := c.byKind[k]
		s += fmt.Sprintf(" %s %d/%d", k, n[0], n[1])
	}
	return s
}

// filesLimit: under sandbox.max_file_mb = 1 a 1 MiB write goes through and
// reads back whole; one byte more is refused naming the limit and leaves
// no file; a bigger file made in the sandbox cannot be read out.
func filesLimit(t *testing.T, ctx context.Context, a *sdkAppliance, sb string) {
	const mib = 1 << 20
	body := bytes.Repeat([]byte("x"), mib)
	if _, err := a.c.WriteFile(ctx, sb, "/tmp/limit-ok", 0o644, mib, bytes.NewReader(body)); err != nil {
		t.Fatalf("write 1 MiB under a 1 MiB limit: %v", err)
	}
	var out bytes.Buffer
	if n, err := a.c.ReadFile(ctx, sb, "/tmp/limit-ok", &out); err != nil || n != mib {
		t.Fatalf("read back 1 MiB: %d bytes, %v", n, err)
	}
	_, err := a.c.WriteFile(ctx, sb, "/tmp/limit-big", 0o644, mib+1, bytes.NewReader(append(body, 'y')))
	if !client.IsCode(err, client.CodeInvalid) || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("write 1 MiB + 1 under a 1 MiB limit: %v, want invalid naming the limit 1048576", err)
	}
	if _, err := a.c.Stat(ctx, sb, "/tmp/limit-big"); !client.IsCode(err, client.CodeNotFound) {
		t.Errorf("the refused write left a file: %v", err)
	}
	if res, err := a.c.Exec(ctx, sb, client.ExecRequest{Shell: "head -c 1048577 /dev/zero > /tmp/limit-grown"}, io.Discard, io.Discard); err != nil || res.ExitCode != 0 {
		t.Fatalf("make a 1 MiB + 1 file: %+v %v", res, err)
	}
	if _, err := a.c.ReadFile(ctx, sb, "/tmp/limit-grown", io.Discard); err == nil || !strings.Contains(err.Error(), "1048576") {
		t.Errorf("read of 1 MiB + 1 under a 1 MiB limit: %v, want an error naming the limit", err)
	}
}
