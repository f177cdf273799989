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
	return suggestedWith(t, st, SuggestOptions{AllowWouldDeny: true, AllowInternal: true})
}

func suggestedWith(t *testing.T, st *Store, opt SuggestOptions) (string, *policies.Policy) {
	t.Helper()
	text, err := Suggest(context.Background(), st, Query{Sandbox: "sb-a"}, opt)
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
		"npm:left-pad@1.3.0", "ports = [8443]", "inspect = false", "lookup-only.example.test (TXT, 1 query)",
		"connect paste.example.test:443 ip=198.18.9.9: refused by deny.hosts[0]"} {
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

// sourcePolicy is the policy the S3 run was recorded under (users.md S3):
// audit mode, a [deny] for the metadata address, an internal API with
// routes and an injected token, a webhook, a mirror with package rules.
const sourcePolicy = `version = 1
mode = "audit"
[deny]
cidrs = ["169.254.169.254/32"]
[categories.mirror]
kind = "registries"
hosts = ["*.mirror.example.test"]
packages = { deny = ["npm:event-stream<=3.3.6"] }
[categories.git]
hosts = ["git.example.test"]
[categories.staging]
kind = "internal_api"
hosts = ["api.staging.example.test"]
cidrs = ["10.50.0.0/16"]
routes = [{ methods = ["GET"], path = "/v2/**" }]
inject = { header = "Authorization", secret = "staging-token", format = "Bearer {}" }
[categories.webhooks]
hosts = ["hooks.example.test"]
paths = ["/services/T01/agentstatus"]
max_body = "16KiB"
[categories.lab]
kind = "public_web"
cidrs = ["10.60.0.0/16"]
[[tests]]
request = "GET https://api.staging.example.test/v2/items/1"
expect = "allow"
`

// s3Run: what the agent did, with the verdicts the source policy gave.
func s3Run() []Event {
	i := 0
	mk := func(k Kind, verdict, rule, cat string, wouldDeny bool) Event {
		e := New(k, "sb-a")
		e.Time = t0.Add(time.Duration(i) * time.Second)
		i++
		e.Verdict, e.Rule, e.Category, e.WouldDeny = verdict, rule, cat, wouldDeny
		return e
	}
	http := func(verdict, rule, cat string, wouldDeny bool, method, host, path, query string) Event {
		e := mk(KindHTTP, verdict, rule, cat, wouldDeny)
		e.HTTP = &HTTP{Method: method, Scheme: "https", Host: host, Path: path, Query: query}
		return e
	}
	flow := func(verdict, rule, cat string, wouldDeny bool, host, dialed string) Event {
		e := mk(KindFlow, verdict, rule, cat, wouldDeny)
		e.Flow = &Flow{Stage: "decision", SNI: host, Host: host, Dialed: dialed, Handling: "inspect"}
		return e
	}
	return []Event{
		http("allow", "categories.mirror.hosts[0]", "mirror", false, "GET", "npm.mirror.example.test", "/left-pad/-/left-pad-1.3.0.tgz", ""),
		http("allow", "categories.git.hosts[0]", "git", false, "GET", "git.example.test", "/acme/app.git/info/refs", "service=git-upload-pack"),
		http("deny", "categories.git.push", "git", false, "POST", "git.example.test", "/acme/app.git/git-receive-pack", ""),
		http("allow", "categories.staging.routes[0]", "staging", false, "GET", "api.staging.example.test", "/v2/items/1", ""),
		http("audit", "categories.staging.routes", "staging", true, "DELETE", "api.staging.example.test", "/v2/items/7", ""),
		http("allow", "categories.webhooks.paths[0]", "webhooks", false, "POST", "hooks.example.test", "/services/T01/agentstatus", ""),
		flow("audit", "default", "", true, "pastebin.example.test", "203.0.113.7:443"),
		flow("audit", "deny.cidrs[0]", "", true, "metadata.example.test", "169.254.169.254:443"),
		flow("allow", "categories.staging.hosts[0]", "staging", false, "api.staging.example.test", "10.50.0.9:443"),
		flow("allow", "categories.lab.cidrs[0]", "lab", false, "db.lab.example.test", "10.60.0.5:443"),
	}
}

// TestSuggestKeepsTheSourcePolicy: with the source policy, the suggestion
// keeps [deny], kinds, routes, paths, inject and package rules; it drops
// only the refused requests (git keeps its clone when a push was refused);
// it allows no would-deny, metadata or private destination without a flag;
// and it passes check --strict and its own tests (users.md S3).
func TestSuggestKeepsTheSourcePolicy(t *testing.T) {
	src, err := policies.Parse("agent.toml", []byte(sourcePolicy))
	if err != nil {
		t.Fatal(err)
	}
	st := storeOf(t, s3Run())
	text, pol := suggestedWith(t, st, SuggestOptions{Source: src, SourceText: []byte(sourcePolicy)})
	t.Logf("suggested policy:\n%s", text)
	if w := pol.Warnings(); len(w) > 0 {
		t.Errorf("warnings: %v", w)
	}
	res := pol.RunTests()
	if len(res) < 8 {
		t.Errorf("only %d tests", len(res))
	}
	for _, r := range res {
		if !r.Pass {
			t.Errorf("%s: %v", r.Case.Line, r.Problems)
		}
	}
	for _, want := range []string{`"169.254.169.254/32"`, `kind = "internal_api"`, `path = "/v2/**"`, `secret = "staging-token"`,
		`deny = ["npm:event-stream<=3.3.6"]`, `paths = ["/services/T01/agentstatus"]`, `hosts = ["npm.mirror.example.test"]`, `cidrs = ["10.50.0.0/16"]`} {
		if !strings.Contains(text, want) {
			t.Errorf("suggestion lacks %s", want)
		}
	}
	for _, tc := range []struct {
		req  string
		want policies.Action
	}{
		{"GET https://git.example.test/acme/app.git/info/refs?service=git-upload-pack", policies.ActionAllow},
		{"POST https://git.example.test/acme/app.git/git-receive-pack", policies.ActionDeny},
		{"GET https://api.staging.example.test/v2/items/2", policies.ActionAllow},
		{"DELETE https://api.staging.example.test/v2/items/7", policies.ActionDeny},
		{"GET https://npm.mirror.example.test/event-stream/-/event-stream-3.3.6.tgz", policies.ActionDeny},
		{"GET https://other.mirror.example.test/left-pad", policies.ActionDeny},
		{"POST https://hooks.example.test/services/T01/other", policies.ActionDeny},
		{"connect pastebin.example.test:443 ip=203.0.113.7", policies.ActionDeny},
		{"connect metadata.example.test:443 ip=169.254.169.254", policies.ActionDeny},
		{"connect api.staging.example.test:443 ip=169.254.169.254", policies.ActionDeny},
		{"connect api.staging.example.test:443 ip=10.50.0.9", policies.ActionAllow},
		{"connect db.lab.example.test:443 ip=10.60.0.5", policies.ActionAllow},
	} {
		if v := pol.Decide(mustRequest(t, tc.req)); v.Action != tc.want {
			t.Errorf("%s: %s by %s, want %s", tc.req, v.Action, v.Rule, tc.want)
		}
	}
	// A name its category decided by cidrs alone does not become a host
	// pattern: that would allow the name at any public address.
	if c, ok := pol.Category("lab"); !ok || len(c.Hosts) != 0 || len(c.CIDRs) != 1 {
		t.Errorf("lab: %+v", c)
	}
	if c, ok := pol.Category("staging"); !ok || c.Inject == nil || c.Mode != policies.ModeEnforce {
		t.Errorf("staging lost its inject or is not enforced: %+v", c)
	}

	// --allow-would-deny allows the would-deny nothing in the source
	// refuses (pastebin, under default) and keeps refusing what a kept
	// source rule refuses (the metadata address under [deny], staging's
	// DELETE under its routes).
	text, pol = suggestedWith(t, st, SuggestOptions{Source: src, SourceText: []byte(sourcePolicy), AllowWouldDeny: true, AllowInternal: true})
	for _, tc := range []struct {
		req  string
		want policies.Action
	}{
		{"connect pastebin.example.test:443 ip=203.0.113.7", policies.ActionAllow},
		{"connect metadata.example.test:443 ip=169.254.169.254", policies.ActionDeny},
		{"DELETE https://api.staging.example.test/v2/items/7", policies.ActionDeny},
	} {
		if v := pol.Decide(mustRequest(t, tc.req)); v.Action != tc.want {
			t.Errorf("with the flags: %s: %s by %s, want %s\n%s", tc.req, v.Action, v.Rule, tc.want, text)
		}
	}
}

// TestSuggestNeedsFlagsToAllowRisk: would-deny and non-public destinations
// become allows only with the flag that names the risk, and a metadata
// address allowed that way is marked with the cidrs escape hatch.
func TestSuggestNeedsFlagsToAllowRisk(t *testing.T) {
	e := New(KindFlow, "sb-a")
	e.Time, e.Verdict, e.Rule, e.WouldDeny = t0, "audit", "default", true
	e.Flow = &Flow{Stage: "decision", OrigDst: "169.254.169.254:80", Handling: "inspect"}
	pub := New(KindHTTP, "sb-a")
	pub.Time, pub.Verdict, pub.Rule, pub.WouldDeny = t0.Add(time.Second), "audit", "default", true
	pub.HTTP = &HTTP{Method: "POST", Scheme: "https", Host: "pastebin.example.test", Path: "/api/paste"}
	st := storeOf(t, []Event{e, pub})
	metadata := mustRequest(t, "connect 169.254.169.254:80")
	paste := mustRequest(t, "POST https://pastebin.example.test/api/paste")
	for _, tc := range []struct {
		opt                  SuggestOptions
		wantMetadata, wantPB bool
	}{
		{SuggestOptions{}, false, false},
		{SuggestOptions{AllowInternal: true}, false, false},
		{SuggestOptions{AllowWouldDeny: true}, false, true},
		{SuggestOptions{AllowWouldDeny: true, AllowInternal: true}, true, true},
	} {
		text, pol := suggestedWith(t, st, tc.opt)
		if got := pol.Decide(metadata).Action.Allows(); got != tc.wantMetadata {
			t.Errorf("%+v: metadata allowed = %v\n%s", tc.opt, got, text)
		}
		if got := pol.Decide(paste).Action.Allows(); got != tc.wantPB {
			t.Errorf("%+v: pastebin allowed = %v\n%s", tc.opt, got, text)
		}
		if tc.wantMetadata != strings.Contains(text, policies.HatchRiskyCIDRs+" = true") {
			t.Errorf("%+v: escape hatch set = %v\n%s", tc.opt, !tc.wantMetadata, text)
		}
	}
}

func mustRequest(t *testing.T, line string) policies.Request {
	t.Helper()
	r, err := policies.ParseRequest(line)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
