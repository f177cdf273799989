package audit

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"airlock/policies"
)

// auditRun is what a sandbox did under an audit-mode policy that only knew
// the registry: everything else was let through with would_deny.
func auditRun() []Event {
	i := 0
	mk := func(k Kind, verdict, rule, cat string, wouldDeny bool) Event {
		e := New(k, "sb-a")
		e.Time = t0.Add(time.Duration(i) * time.Second)
		i++
		e.Verdict, e.Rule, e.Category, e.WouldDeny = verdict, rule, cat, wouldDeny
		return e
	}
	allow := func(k Kind) Event {
		return mk(k, "allow", "categories.registries.hosts[0] (audit.toml:5:9)", "registries", false)
	}
	audited := func(k Kind) Event { return mk(k, "audit", "default", "", true) }
	var out []Event
	add := func(e Event) { out = append(out, e) }

	e := allow(KindDNS)
	e.DNS = &DNS{QName: "registry.example.test", QType: "A", RCode: "NOERROR", Answers: []string{"198.18.1.1"}}
	add(e)
	e = allow(KindFlow)
	e.Flow = &Flow{Stage: "decision", SNI: "registry.example.test", Host: "registry.example.test", Dialed: "198.18.1.1:443", Handling: "inspect"}
	add(e)
	e = allow(KindHTTP)
	e.HTTP = &HTTP{Method: "GET", Scheme: "https", Host: "registry.example.test", Path: "/left-pad/-/left-pad-1.3.0.tgz",
		Package: &Package{Ecosystem: "npm", Name: "left-pad", Version: "1.3.0"}}
	add(e)

	e = audited(KindDNS)
	e.DNS = &DNS{QName: "git.example.test", QType: "AAAA", RCode: "NOERROR", Answers: []string{"198.18.2.2"}}
	add(e)
	e = audited(KindFlow)
	e.Flow = &Flow{Stage: "decision", SNI: "git.example.test", Host: "git.example.test", Dialed: "198.18.2.2:443", Handling: "inspect"}
	add(e)
	e = audited(KindHTTP)
	e.HTTP = &HTTP{Method: "GET", Scheme: "https", Host: "git.example.test", Path: "/acme/app.git/info/refs", Query: "service=git-upload-pack"}
	add(e)
	e = audited(KindHTTP)
	e.HTTP = &HTTP{Method: "POST", Scheme: "https", Host: "git.example.test", Path: "/acme/app.git/git-upload-pack"}
	add(e)

	e = mk(KindDNS, "audit", "categories.docs.hosts[0] (audit.toml:9:9)", "docs", true)
	e.DNS = &DNS{QName: "docs.example.test", QType: "A", RCode: "NOERROR", Answers: []string{"198.18.3.3"}}
	add(e)
	e = mk(KindFlow, "audit", "categories.docs.ports (audit.toml:10:9)", "docs", true)
	e.Flow = &Flow{Stage: "decision", Host: "docs.example.test", SNI: "docs.example.test", Dialed: "198.18.3.3:8443", Handling: "inspect"}
	add(e)
	e = mk(KindHTTP, "audit", "categories.docs.ports (audit.toml:10:9)", "docs", true)
	e.HTTP = &HTTP{Method: "GET", Scheme: "https", Host: "docs.example.test:8443", Path: "/guide"}
	add(e)

	e = audited(KindFlow)
	e.Flow = &Flow{Stage: "decision", SNI: "media.example.test", Host: "media.example.test", Dialed: "198.18.4.4:443", Handling: "splice"}
	add(e)
	e = audited(KindFlow)
	e.Flow = &Flow{Stage: "decision", OrigDst: "198.18.7.7:443", Handling: "inspect"}
	add(e)
	e = audited(KindDNS)
	e.DNS = &DNS{QName: "lookup-only.example.test", QType: "TXT", RCode: "NOERROR"}
	add(e)
	e = mk(KindFlow, "deny", "deny.hosts[0] (audit.toml:3:9)", "", true)
	e.Flow = &Flow{Stage: "decision", SNI: "paste.example.test", Host: "paste.example.test", Dialed: "198.18.9.9:443", Handling: "none"}
	add(e)
	e = mk(KindExec, "", "", "", false)
	e.Exec = &Exec{Stage: "started", Argv: []string{"npm", "ci"}}
	add(e)
	return out
}

func storeOf(t *testing.T, evs []Event) *Store {
	t.Helper()
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir})
	for _, e := range evs {
		p.Emit(e)
	}
	flush(t, p)
	p.Close()
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func suggested(t *testing.T, st *Store) (string, *policies.Policy) {
	t.Helper()
	text, err := Suggest(context.Background(), st, Query{Sandbox: "sb-a"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := policies.Parse("suggested.toml", []byte(text))
	if err != nil {
		t.Fatalf("suggested policy does not pass check: %v\n%s", err, text)
	}
	return text, p
}

func TestSuggestAllowsExactlyTheRecordedTraffic(t *testing.T) {
	evs := auditRun()
	st := storeOf(t, evs)
	text, pol := suggested(t, st)
	t.Logf("suggested policy:\n%s", text)
	for _, e := range evs {
		req, ok := RequestOf(&e)
		if !ok {
			continue
		}
		v := pol.Decide(req)
		host := Host(&e)
		wantAllowed := host != "lookup-only.example.test" && host != "paste.example.test"
		if got := outcomeOf(v) == OutcomeAllowed; got != wantAllowed {
			t.Errorf("%s: allowed=%v, want %v (%s: %s)", DescribeRequest(req), got, wantAllowed, v.Rule, v.Reason)
		}
	}
	// Nothing beyond what was seen.
	for _, line := range []string{
		"GET https://other.example.test/",
		"DELETE https://registry.example.test/left-pad",
		"GET https://registry.example.test:8443/left-pad",
		"POST https://docs.example.test:8443/guide",
		"POST https://git.example.test/acme/app.git/git-receive-pack",
		"connect 198.18.7.8:443",
		"dns lookup-only.example.test TXT",
		"dns docs.example.test TXT",
	} {
		req, err := policies.ParseRequest(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if v := pol.Decide(req); outcomeOf(v) != OutcomeDenied {
			t.Errorf("%s: %s by %s, want denied", line, v.Action, v.Rule)
		}
	}
	for _, want := range []string{"[categories.registries]", "[categories.docs]", "kind = \"public_web\"", "[categories.git]", "[categories.addresses]",
		"npm:left-pad@1.3.0", "ports = [8443]", "inspect = false", "lookup-only.example.test (TXT, 1 queries)",
		"paste.example.test: deny.hosts[0]"} {
		if !strings.Contains(text, want) {
			t.Errorf("suggested policy lacks %q", want)
		}
	}
}

func TestReplayDiffs(t *testing.T) {
	st := storeOf(t, auditRun())
	text, pol := suggested(t, st)
	ctx := context.Background()

	// Against the recorded verdicts: the suggested policy allows what was
	// audited as would-deny, and nothing recorded as allowed is now denied.
	res, err := Replay(ctx, st, Query{}, pol, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.NewlyDenied) != 0 || len(res.NewlyAllowed) == 0 || res.Decided != 14 {
		t.Fatalf("replay against recorded: %+v", res)
	}

	// Two policies: the candidate drops the docs category.
	var blocks []string
	for _, b := range strings.Split(text, "\n\n") {
		if !strings.HasPrefix(b, "[categories.docs]") {
			blocks = append(blocks, b)
		}
	}
	cand, err := policies.Parse("candidate.toml", []byte(strings.Join(blocks, "\n\n")))
	if err != nil {
		t.Fatal(err)
	}
	res, err = Replay(ctx, st, Query{}, cand, pol)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range res.NewlyDenied {
		got = append(got, c.Request)
	}
	slices.Sort(got)
	want := []string{"GET https://docs.example.test:8443/guide", "connect docs.example.test:8443 ip=198.18.3.3", "dns docs.example.test A"}
	if d := cmp.Diff(want, got); d != "" || len(res.NewlyAllowed) != 0 || !res.Changed() {
		t.Errorf("newly denied (-want +got):\n%s\nresult %+v", d, res)
	}
	if res, _ := Replay(ctx, st, Query{}, pol, pol); res.Changed() {
		t.Errorf("a policy differs from itself: %+v", res)
	}
}
