package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"airlock/e2e/world"
)

// TestBypassSuite runs every attempt in a default sandbox and in one given
// CAP_NET_RAW and CAP_NET_ADMIN inside its namespace. Each attempt must be
// refused, logged for the sandbox with a reason, and leave the world's
// canary, evil server and capture empty.
func TestBypassSuite(t *testing.T) {
	requireAppliance(t)
	w := startWorld(t)
	a := startAppliance(t, w)
	peer := a.newSandbox(t, false)
	for _, variant := range []struct {
		name string
		caps bool
	}{{"default", false}, {"cap-net-raw-admin", true}} {
		t.Run(variant.name, func(t *testing.T) {
			t.Parallel()
			sb := a.newSandbox(t, variant.caps)
			env := EnvFor(w)
			env.Gateway, env.Peer = a.gateway, peer.address
			env.ProxyPort, env.ExplicitPort = a.ports.proxy, a.ports.explicit
			env.ControlPort, env.MetricsPort = a.ports.control, a.ports.metrics
			env.ControlSocket, env.Probe = a.socket, "python3 "+probePath
			for i, at := range Attempts {
				mark := fmt.Sprintf("m%02d%s%s", i, variant.name[:1], w.ID)
				t.Run(at.Name, func(t *testing.T) { runAttempt(t, w, sb, env, at, mark) })
			}
		})
	}
}

// leakMarkers in a command's output mean a world server answered it.
var leakMarkers = []string{world.CanaryBody, world.EvilBody, "world-txt", "REACHED:"}

// localRefusals are what the sandbox's own kernel says when it refuses
// before any packet leaves.
var localRefusals = []string{"not permitted", "Operation not permitted", "Network is unreachable",
	"Cannot assign requested address", "Address family not supported", "No such file or directory",
	"Could not resolve host", "Couldn't connect to server", "resolve"}

func runAttempt(t *testing.T, w *world.World, sb *sandbox, env Env, at Attempt, mark string) {
	cmd, err := env.Expand(at, mark)
	if err != nil {
		t.Fatal(err)
	}
	wants, err := env.ExpandLog(at, mark)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wmark := w.Mark()
	r, err := sb.run(ctx, cmd, nil)
	var problems []string
	if err != nil {
		problems = append(problems, fmt.Sprintf("exec failed: %v", err))
	}
	if r.code == 0 && !at.MaySucceed {
		problems = append(problems, "the command succeeded (exit 0): the attempt got through")
	}
	for _, m := range leakMarkers {
		if strings.Contains(r.output(), m) {
			problems = append(problems, fmt.Sprintf("the output holds %q: a world server answered", m))
		}
	}
	// The log: one refusal for this sandbox, with a reason, about this attempt.
	logged, local := false, false
	deadline := time.Now().Add(6 * time.Second)
	for !logged && time.Now().Before(deadline) {
		evs, err := sb.events(ctx, r.start.Add(-time.Second))
		if err == nil {
			_, logged = findRefusal(evs, sb.id, wants)
		}
		if !logged {
			time.Sleep(300 * time.Millisecond)
		}
	}
	if !logged && at.LocalOK && r.code != 0 && containsAny(r.output(), localRefusals) {
		local = true
		t.Logf("refused inside the sandbox before any packet left: %s", firstLine([]byte(r.output())))
	}
	if !logged && !local {
		problems = append(problems, fmt.Sprintf("no denial or drop event for sandbox %s with a reason holding %q", sb.id, wants))
	}
	problems = append(problems, worldProblems(w, at, wmark, mark)...)
	if len(problems) > 0 {
		evs, _ := sb.events(context.Background(), r.start.Add(-2*time.Second))
		t.Errorf("bypass attempt %s (class %s, sandbox %s, caps %v)\n  refused means: %s\n  command: %s\n  exit %d, output:\n%s\n  problems:\n    - %s\n  audit events around it:\n%s  world records since:\n%s",
			at.Name, at.Class, sb.id, sb.caps, at.Refused, cmd, r.code, indent(r.output()),
			strings.Join(problems, "\n    - "), describe(evs), records(w.Since(wmark)))
	}
}

// worldProblems lists what reached the world that must not have.
func worldProblems(w *world.World, at Attempt, wmark uint64, mark string) []string {
	var p []string
	if l := w.Since(wmark, world.Leaks); len(l) > 0 {
		p = append(p, fmt.Sprintf("the world recorded %d leak(s) (canary, evil server or a foreign source):\n%s", len(l), records(l)))
	}
	may := map[world.Role]bool{}
	for _, r := range at.WorldMaySee {
		may[r] = true
	}
	dns := 0
	for _, r := range w.Since(wmark, world.Containing(mark)) {
		switch {
		case r.Role == world.RoleDNS && dns < at.DNSMax:
			dns++
		case may[r.Role]:
		default:
			p = append(p, "the world received the attempt: "+r.String())
		}
	}
	if at.NoPush {
		if pushes := w.Pushes(wmark); len(pushes) > 0 {
			p = append(p, "the git server received a push:\n"+records(pushes))
		}
	}
	if at.NoAPIWrite {
		writes := w.Since(wmark, world.ByRole(world.RoleAPI), func(r world.Record) bool { return r.Method != "GET" })
		if len(writes) > 0 {
			p = append(p, "the internal API received a write:\n"+records(writes))
		}
	}
	return p
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
