package serve

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"airlock/audit"
	"airlock/policies"
)

type recorder struct {
	mu     sync.Mutex
	events []audit.Event
}

func (r *recorder) Emit(e audit.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kind(k audit.Kind) []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

const polA = `version = 1
[categories.git]
hosts = ["git.example.test"]
`

const polB = `version = 1
[categories.git]
hosts = ["git.example.test", "git2.example.test"]
`

func writePolicy(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+".toml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func connect(host string) policies.Request {
	return policies.Request{Stage: policies.StageConnect, Host: host, SNI: host, Port: 443}
}

func TestPolicyReload(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "agent", polA)
	rec := &recorder{}
	ps, err := newPolicySet(dir, policies.Operator{}, rec)
	if err != nil {
		t.Fatal(err)
	}
	ref, ok := ps.Get("agent")
	if !ok {
		t.Fatal("policy agent not loaded")
	}
	if ref.Decide(connect("git2.example.test")).Action.Allows() {
		t.Fatal("git2 allowed before the reload")
	}
	oldHash := ref.load().Hash()

	// A broken file is rejected with its errors; the running version stays.
	writePolicy(t, dir, "agent", polB+"\nbogus_key = 1\n")
	res, err := ps.Reload("tester")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 1 || !strings.Contains(strings.Join(res.Rejected[0].Errors, "\n"), "bogus_key") {
		t.Fatalf("broken reload = %+v, want agent rejected naming bogus_key", res)
	}
	if ref.load().Hash() != oldHash || ref.Decide(connect("git2.example.test")).Action.Allows() {
		t.Fatal("a broken file replaced the running policy")
	}

	// A valid change replaces it atomically; the same ref (held by running
	// sandboxes and open tunnels) decides with the new version.
	writePolicy(t, dir, "agent", polB)
	res, err = ps.Reload("tester")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Reloaded) != 1 || res.Reloaded[0].OldHash != oldHash || res.Reloaded[0].NewHash == oldHash {
		t.Fatalf("reload = %+v", res)
	}
	if !ref.Decide(connect("git2.example.test")).Action.Allows() {
		t.Error("the held ref still decides with the old version after the reload")
	}
	// Unchanged files are reported as such.
	res, _ = ps.Reload("tester")
	if len(res.Unchanged) != 1 || len(res.Reloaded) != 0 {
		t.Errorf("second reload = %+v, want unchanged", res)
	}

	ev := rec.kind(audit.KindPolicy)
	var actions []string
	for _, e := range ev {
		actions = append(actions, e.Policy.Action)
	}
	if strings.Join(actions, ",") != "loaded,rejected,reloaded" {
		t.Fatalf("policy events = %v, want loaded,rejected,reloaded", actions)
	}
	rel := ev[2].Policy
	if rel.OldHash != oldHash || rel.NewHash != ref.load().Hash() || rel.OldHash == rel.NewHash {
		t.Errorf("reload event must carry both hashes: %+v", rel)
	}
	if !strings.Contains(ev[2].Reason, "tester") || !strings.Contains(strings.Join(ev[1].Policy.Errors, " "), "tester") {
		t.Errorf("events do not name who asked: %+v / %+v", ev[2], ev[1].Policy)
	}
}

func TestPolicySetStartRefusesBrokenFiles(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "good", polA)
	writePolicy(t, dir, "bad", "version = 1\n[categories.git]\nhosts = [\"*x.test\"]\n")
	_, err := newPolicySet(dir, policies.Operator{}, &recorder{})
	if err == nil || !strings.Contains(err.Error(), "bad.toml:3") {
		t.Fatalf("err = %v, want the bad file's positioned error", err)
	}
}

// TestPolicySetBindsOperator: every version the set loads, at start and
// on reload, answers Reach with the operator's allow-ranges and own
// addresses, and a [deny] cidr inside an allow-range stays unreachable.
func TestPolicySetBindsOperator(t *testing.T) {
	src := `version = 1
[deny]
cidrs = ["198.18.0.66/32"]
[categories.git]
hosts = ["git.example.test"]
`
	dir := t.TempDir()
	writePolicy(t, dir, "agent", src)
	op := policies.Operator{Allow: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}, Own: []netip.Addr{netip.MustParseAddr("198.18.0.1")}}
	ps, err := newPolicySet(dir, op, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := ps.Get("agent")
	check := func(when string) {
		v := ref.Decide(connect("git.example.test"))
		for _, tt := range []struct {
			addr string
			want policies.Reach
		}{
			{"198.18.0.10", policies.ReachOperator}, // the lab range, named by the appliance config
			{"198.18.1.10", policies.ReachNonPublic},
			{"198.18.0.66", policies.ReachDenied}, // in the lab range but [deny]ed by the policy
			{"198.18.0.1", policies.ReachOwn},
			{"169.254.169.254", policies.ReachNonPublic},
		} {
			if got := ref.Reach(netip.MustParseAddr(tt.addr), v); got.Reach != tt.want {
				t.Errorf("%s: Reach(%s) = %v, want %v", when, tt.addr, got, tt.want)
			}
		}
	}
	check("loaded")
	writePolicy(t, dir, "agent", src+"# changed\n")
	if res, err := ps.Reload("test"); err != nil || len(res.Reloaded) != 1 {
		t.Fatalf("reload: %+v, %v", res, err)
	}
	check("reloaded")
}
