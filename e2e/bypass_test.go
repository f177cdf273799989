package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/e2e/world"
)

// TestBypassSuite runs every attempt in a default sandbox and again with
// CAP_NET_RAW and CAP_NET_ADMIN inside the sandbox's namespace. Each
// attempt must be refused, logged for the sandbox with a reason, and leave
// the world's canary, evil server and capture empty.
//
// The second variant is created through the control API with CAP_NET_RAW
// and CAP_NET_ADMIN (client.CreateRequest.CapAdd): its commands run as the
// sandbox's root holding both over its own network namespace, address, veth
// and files.
//
// The attempts of one sandbox run in one exec (a shell loop that stamps
// each attempt's start and end): an exec through Podman costs a second or
// more on this machine, and 80 of them would not fit CI's time. Each
// attempt is then judged on its own output, exit code and time window.
func TestBypassSuite(t *testing.T) {
	requireAppliance(t)
	t.Parallel()
	w := startWorld(t)
	a := startAppliance(t, w)
	peer := a.newSandbox(t, false)
	for _, variant := range []string{"default", "net-admin-raw"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			var sb *sandbox
			if variant == "default" {
				sb = a.newSandbox(t, false)
			} else {
				sb = a.newCapSandbox(t)
			}
			env := EnvFor(w)
			env.Gateway, env.Peer = a.gateway, peer.address
			env.ProxyPort, env.ExplicitPort = a.ports.proxy, a.ports.explicit
			env.ControlPort, env.MetricsPort = a.ports.control, a.ports.metrics
			env.ControlSocket, env.Probe = a.socket, "python3 "+probePath
			runSuite(t, w, sb, env, variant[:1], Attempts)
		})
	}
}

// newCapSandbox is a sandbox given CAP_NET_RAW and CAP_NET_ADMIN in its own
// namespaces through the API.
func (a *appliance) newCapSandbox(t *testing.T) *sandbox {
	return a.newSandbox(t, true)
}

// attemptRun is one attempt as it ran in the batch.
type attemptRun struct {
	at         Attempt
	mark, cmd  string
	wants      []string
	output     string
	code       int
	start, end time.Time
	wmark      uint64 // the world log before the batch
}

func runSuite(t *testing.T, w *world.World, sb *sandbox, env Env, tag string, attempts []Attempt) {
	runs := make([]*attemptRun, len(attempts))
	var script strings.Builder
	for i, at := range attempts {
		mark := fmt.Sprintf("m%02d%s%s", i, tag, w.ID)
		cmd, err := env.Expand(at, mark)
		if err != nil {
			t.Fatal(err)
		}
		wants, err := env.ExpandLog(at, mark)
		if err != nil {
			t.Fatal(err)
		}
		runs[i] = &attemptRun{at: at, mark: mark, cmd: cmd, wants: wants, code: -1}
		fmt.Fprintf(&script, "echo; echo \"@@BEGIN %d $(date +%%s.%%N)\"; c=$(echo %s | base64 -d); timeout 30 sh -c \"$c\" </dev/null 2>&1; "+
			"rc=$?; echo; echo \"@@END %d $rc $(date +%%s.%%N)\"\n", i, base64.StdEncoding.EncodeToString([]byte(cmd)), i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	wmark := w.Mark()
	batchStart := time.Now()
	r, err := sb.runTimeout(ctx, script.String(), 9*time.Minute)
	if err != nil {
		t.Fatalf("the batch exec failed: %v\n%s", err, r.output())
	}
	parseBatch(r.stdout, runs)
	time.Sleep(3 * time.Second) // drop events are aggregated before they are written
	evs, err := sb.events(ctx, batchStart.Add(-time.Second))
	if err != nil {
		t.Fatalf("read the audit log: %v", err)
	}
	for _, run := range runs {
		run.wmark = wmark
		t.Run(run.at.Name, func(t *testing.T) { judge(t, w, sb, run, evs) })
	}
}

// parseBatch reads the @@BEGIN/@@END stamps and the output between them.
func parseBatch(out string, runs []*attemptRun) {
	var cur *attemptRun
	var buf strings.Builder
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "@@BEGIN":
			if i, err := strconv.Atoi(f[1]); err == nil && i < len(runs) {
				cur = runs[i]
				cur.start = stamp(f[2])
				buf.Reset()
			}
		case len(f) == 4 && f[0] == "@@END" && cur != nil:
			cur.code, _ = strconv.Atoi(f[2])
			cur.end = stamp(f[3])
			cur.output = strings.TrimSpace(buf.String())
			cur = nil
		case cur != nil:
			buf.WriteString(line + "\n")
		}
	}
}

func stamp(s string) time.Time {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9))
}

// eventGrace is how long after an attempt its events may still be written.
const eventGrace = 5 * time.Second

func judge(t *testing.T, w *world.World, sb *sandbox, run *attemptRun, evs []audit.Event) {
	at := run.at
	var problems []string
	if run.start.IsZero() || run.end.IsZero() {
		problems = append(problems, "the attempt did not run to its end in the batch")
	}
	if run.code == 0 && !at.MaySucceed {
		problems = append(problems, "the command succeeded (exit 0): the attempt got through")
	}
	for _, m := range leakMarkers {
		if strings.Contains(run.output, m) {
			problems = append(problems, fmt.Sprintf("the output holds %q: a world server answered", m))
		}
	}
	window := eventsBetween(evs, run.start.Add(-500*time.Millisecond), run.end.Add(eventGrace))
	_, logged := findRefusal(window, sb.id, run.wants)
	if !logged && at.MaySucceed {
		// Served from the checked address instead: the flow must say so.
		_, logged = findEvent(window, sb.id, run.wants, func(e audit.Event) bool { return e.Flow != nil && e.Flow.Mismatch })
	}
	if !logged && at.LocalOK && run.code != 0 && containsAny(run.output, localRefusals) {
		logged = true
		t.Logf("refused inside the sandbox before any packet left: %s", firstLine([]byte(run.output)))
	}
	if !logged {
		problems = append(problems, fmt.Sprintf("no denial or drop event for sandbox %s with a reason holding %q", sb.id, run.wants))
	}
	problems = append(problems, worldProblems(w, at, run.wmark, run.mark, run.start, run.end.Add(eventGrace))...)
	if len(problems) > 0 {
		t.Errorf("bypass attempt %s (class %s, sandbox %s, caps %v)\n  refused means: %s\n  command: %s\n  exit %d, output:\n%s\n  problems:\n    - %s\n  audit events around it:\n%s",
			at.Name, at.Class, sb.id, sb.caps, at.Refused, run.cmd, run.code, indent(run.output),
			strings.Join(problems, "\n    - "), describe(eventsBetween(evs, run.start.Add(-2*time.Second), run.end.Add(eventGrace))))
	}
}

func eventsBetween(evs []audit.Event, from, to time.Time) []audit.Event {
	var out []audit.Event
	for _, e := range evs {
		if !e.Time.Before(from) && !e.Time.After(to) {
			out = append(out, e)
		}
	}
	return out
}

// leakMarkers in a command's output mean a world server answered it.
var leakMarkers = []string{world.CanaryBody, world.EvilBody, "world-txt", "REACHED:"}

// localRefusals are what the sandbox's own kernel (or resolver) says when
// it refuses before any packet leaves.
var localRefusals = []string{"not permitted", "Permission denied", "Network is unreachable",
	"Cannot assign requested address", "Address family not supported", "No such file or directory",
	"Could not resolve host", "resolve", "Couldn't connect to server", "Read-only file system"}

// worldProblems lists what reached the world that must not have.
// Leaks count only within the attempt's window (from, to).
func worldProblems(w *world.World, at Attempt, wmark uint64, mark string, from, to time.Time) []string {
	var p []string
	inWindow := func(r world.Record) bool { return !r.Time.Before(from) && !r.Time.After(to) }
	if l := w.Since(wmark, world.Leaks, inWindow); len(l) > 0 {
		p = append(p, fmt.Sprintf("the world recorded %d leak(s) (canary, evil server or a foreign source):\n%s", len(l), records(l)))
	}
	may := map[world.Role]bool{}
	for _, r := range at.WorldMaySee {
		may[r] = true
	}
	names := map[string]bool{} // distinct names the world's DNS saw (A and AAAA count once)
	for _, r := range w.Since(wmark, world.Containing(mark)) {
		switch {
		case r.Role == world.RoleDNS && (names[r.QName] || len(names) < at.DNSMax):
			names[r.QName] = true
		case may[r.Role]:
		default:
			p = append(p, "the world received the attempt: "+r.String())
		}
	}
	if at.NoPush {
		if pushes := w.Since(wmark, inWindow, isPush); len(pushes) > 0 {
			p = append(p, "the git server received a push:\n"+records(pushes))
		}
	}
	if at.NoAPIWrite {
		writes := w.Since(wmark, inWindow, world.ByRole(world.RoleAPI), func(r world.Record) bool { return r.Method != "GET" })
		if len(writes) > 0 {
			p = append(p, "the internal API received a write:\n"+records(writes))
		}
	}
	return p
}

func isPush(r world.Record) bool {
	return r.Role == world.RoleGit && (strings.Contains(r.Path, "receive-pack") || strings.Contains(r.Query, "receive-pack"))
}

func records(rs []world.Record) string {
	if len(rs) == 0 {
		return "    (none)\n"
	}
	var b strings.Builder
	for i, r := range rs {
		if i == 20 {
			fmt.Fprintf(&b, "    ... %d more\n", len(rs)-i)
			break
		}
		b.WriteString("    " + r.String() + "\n")
	}
	return b.String()
}

func indent(s string) string {
	if s == "" {
		return "    (no output)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}
