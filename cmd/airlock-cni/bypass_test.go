package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"airlock/audit"
	"airlock/e2e"
	"airlock/e2e/world"
)

// TestBypassFromPod runs the first attempt of every class of the e2e
// bypass suite (e2e.Attempts) from a namespace attached by ptp +
// airlock-cni, under the e2e policy, and judges each as the e2e suite
// does for a Podman sandbox: the command fails, the world receives
// nothing of it, and the node agent logged a denial or drop for the pod
// holding the attempt's strings. The pod runs as root with every
// capability, so attempts the e2e suite may see refused by the sandbox's
// own kernel really send their packets here.
func TestBypassFromPod(t *testing.T) {
	n := newNode(t)
	pol, err := e2e.RenderPolicy(e2e.AddrsOf(n.w))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.dir, "policies", e2e.PolicyName+".toml"), pol, 0o600); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(n.dir, "probe.py")
	if err := os.WriteFile(probe, e2e.ProbeScript, 0o644); err != nil {
		t.Fatal(err)
	}
	n.start()
	list := n.conflist("1.0.0")
	p, peer := n.newPod("bypass", e2e.PolicyName), n.newPod("peer", e2e.PolicyName)
	n.add(list, p)
	peerRes := n.add(list, peer)
	env := e2e.EnvFor(n.w)
	env.Gateway, env.Peer = n.gw, addrOf(peerRes.IPs[0])
	env.ProxyPort, env.ExplicitPort, env.ControlPort, env.MetricsPort = 15001, 3128, 7443, 9464
	env.ControlSocket, env.Probe = "/nonexistent/airlock.sock", "/usr/bin/python3 "+probe
	for _, at := range firstOfEachClass() {
		t.Run(at.Name, func(t *testing.T) { n.runAttempt(t, p, env, at) })
	}
}

// firstOfEachClass picks one attempt per class. The control class's
// first (the host's unix socket) is skipped: ip netns exec shares the
// host's files, which a pod's own mount namespace does not.
func firstOfEachClass() []e2e.Attempt {
	seen := map[e2e.Class]bool{}
	var out []e2e.Attempt
	for _, a := range e2e.Attempts {
		if seen[a.Class] || a.Name == "control-unix-socket" {
			continue
		}
		seen[a.Class] = true
		out = append(out, a)
	}
	return out
}

func (n *node) runAttempt(t *testing.T, p *pod, env e2e.Env, at e2e.Attempt) {
	mark := "m" + strings.ReplaceAll(at.Name, "-", "")[:6] + n.w.ID
	cmd, err := env.Expand(at, mark)
	if err != nil {
		t.Fatal(err)
	}
	wants, err := env.ExpandLog(at, mark)
	if err != nil {
		t.Fatal(err)
	}
	wmark, start := n.w.Mark(), time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The pod trusts the node's CA, as a Podman sandbox's bundle does.
	ca := filepath.Join(n.dir, "state", "ca.crt")
	out, runErr := exec.CommandContext(ctx, "ip", "netns", "exec", p.name, "env", "SSL_CERT_FILE="+ca, "GIT_SSL_CAINFO="+ca,
		"CURL_CA_BUNDLE="+ca, "sh", "-c", cmd).CombinedOutput()
	end := time.Now()
	var problems []string
	if runErr == nil && !at.MaySucceed {
		problems = append(problems, "the command succeeded: the attempt got through")
	}
	for _, m := range []string{world.CanaryBody, world.EvilBody, "world-txt", "REACHED:"} {
		if bytes.Contains(out, []byte(m)) {
			problems = append(problems, fmt.Sprintf("the output holds %q: a world server answered", m))
		}
	}
	if !n.refusalLogged(p.id(), wants, at, start, runErr != nil, string(out)) {
		problems = append(problems, fmt.Sprintf("no denial or drop event for pod %s holding %q", p.id(), wants))
	}
	problems = append(problems, n.worldProblems(at, wmark, mark, start, end.Add(5*time.Second))...)
	if len(problems) > 0 {
		t.Errorf("bypass attempt %s (class %s) from a CNI pod\n  refused means: %s\n  command: %s\n  output: %s\n  problems: %s",
			at.Name, at.Class, at.Refused, cmd, strings.TrimSpace(string(out)), strings.Join(problems, "; "))
	}
}

// refusalLogged waits (drop events are aggregated for a second) for a
// refusal of the pod whose JSON, joined with its flow's, holds wants.
func (n *node) refusalLogged(id string, wants []string, at e2e.Attempt, since time.Time, failed bool, out string) bool {
	if at.LocalOK && failed && localRefusal(out) {
		return true
	}
	deadline := time.Now().Add(4 * time.Second)
	for {
		evs := n.readEvents(since.Add(-500 * time.Millisecond))
		if hasRefusal(evs, id, wants, at.MaySucceed) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func localRefusal(out string) bool {
	for _, s := range []string{"not permitted", "Permission denied", "Network is unreachable", "Cannot assign requested address",
		"Address family not supported", "Could not resolve host", "resolve", "Couldn't connect to server"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

func (n *node) readEvents(since time.Time) []audit.Event {
	b, _ := os.ReadFile(n.events())
	var out []audit.Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e audit.Event
		if json.Unmarshal(sc.Bytes(), &e) == nil && !e.Time.Before(since) {
			out = append(out, e)
		}
	}
	return out
}

// hasRefusal is the e2e suite's rule: a drop, a deny (or would-deny), or
// a DNS answer whose addresses were stripped, with a reason; with
// mismatchOK, a flow the proxy served from the address it checked.
func hasRefusal(evs []audit.Event, id string, wants []string, mismatchOK bool) bool {
	flows := map[string][]byte{}
	for _, e := range evs {
		if e.Kind == audit.KindFlow && e.ID != "" {
			j, _ := json.Marshal(e)
			flows[e.ID] = append(flows[e.ID], j...)
		}
	}
	for _, e := range evs {
		if e.Sandbox != id {
			continue
		}
		refusal := e.Reason != "" && (e.Kind == audit.KindDrop || e.Verdict == "deny" || e.WouldDeny ||
			e.DNS != nil && len(e.DNS.Stripped) > 0)
		if !refusal && !(mismatchOK && e.Flow != nil && e.Flow.Mismatch) {
			continue
		}
		j, _ := json.Marshal(e)
		if e.HTTP != nil && e.HTTP.FlowID != "" {
			j = append(j, flows[e.HTTP.FlowID]...)
		}
		if containsAll(strings.ToLower(string(j)), wants) {
			return true
		}
	}
	return false
}

func containsAll(s string, wants []string) bool {
	for _, w := range wants {
		if !strings.Contains(s, strings.ToLower(w)) {
			return false
		}
	}
	return true
}

// worldProblems: no leak in the window, no record of the mark outside
// the roles that may see it, no push, no API write.
func (n *node) worldProblems(at e2e.Attempt, wmark uint64, mark string, from, to time.Time) []string {
	var p []string
	w := n.w
	inWindow := func(r world.Record) bool { return !r.Time.Before(from) && !r.Time.After(to) }
	if l := w.Log().Since(wmark, world.Leaks, inWindow); len(l) > 0 {
		p = append(p, fmt.Sprintf("the world recorded leaks: %v", l))
	}
	may := map[world.Role]bool{}
	for _, r := range at.WorldMaySee {
		may[r] = true
	}
	names := map[string]bool{}
	for _, r := range w.Log().Since(wmark, world.Containing(mark)) {
		switch {
		case r.Role == world.RoleDNS && (names[r.QName] || len(names) < at.DNSMax):
			names[r.QName] = true
		case may[r.Role]:
		default:
			p = append(p, "the world received the attempt: "+r.String())
		}
	}
	push := func(r world.Record) bool {
		return r.Role == world.RoleGit && (strings.Contains(r.Path, "receive-pack") || strings.Contains(r.Query, "receive-pack"))
	}
	if at.NoPush && len(w.Log().Since(wmark, inWindow, push)) > 0 {
		p = append(p, "the git server received a push")
	}
	write := func(r world.Record) bool { return r.Role == world.RoleAPI && r.Method != "GET" }
	if at.NoAPIWrite && len(w.Log().Since(wmark, inWindow, write)) > 0 {
		p = append(p, "the internal API received a write")
	}
	return p
}
