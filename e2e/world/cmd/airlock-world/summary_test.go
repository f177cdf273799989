package main

import (
	"net/http"
	"strings"
	"testing"

	"airlock/e2e/world"
)

func testView() view {
	return view{name: func(r world.Role) string { return world.DefaultNames[r][0] }, token: "tok"}
}

func TestSummaryOfAHarmlessRun(t *testing.T) {
	auth := http.Header{"Authorization": {"Bearer tok"}}
	recs := []world.Record{
		{Kind: world.KindDNS, Role: world.RoleDNS, QName: "git.example.test."},
		{Kind: world.KindDNS, Role: world.RoleDNS, QName: "registry.example.test."},
		{Kind: world.KindHTTP, Role: world.RoleGit, Method: "GET", Path: "/acme/demo.git/info/refs", Query: "service=git-upload-pack"},
		{Kind: world.KindHTTP, Role: world.RoleGit, Method: "POST", Path: "/acme/demo.git/git-upload-pack"},
		{Kind: world.KindHTTP, Role: world.RoleAPI, Method: "GET", Path: "/v1/items/42", Header: auth},
		{Kind: world.KindHTTP, Role: world.RoleAPI, Method: "GET", Path: "/v1/items/43"},
	}
	got := summarize(testView(), recs)
	for _, want := range []string{
		"ns.world.test              DNS queries (x2)\n",
		"git.example.test           GET /acme/demo.git/info/refs?service=git-upload-pack, POST /acme/demo.git/git-upload-pack\n",
		"GET /v1/items/42 [with the injected credential], GET /v1/items/43 [no credential]\n",
		"evil.test                  nothing\n",
		"  ok: no git push arrived\n",
		"  ok: no denied package was served\n",
		"  ok: nothing reached evil.test or canary.test, no foreign packet\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "tok\n") || strings.Contains(got, "Bearer") {
		t.Errorf("the summary shows the credential:\n%s", got)
	}
}

func TestSummaryNamesWhatMustNotArrive(t *testing.T) {
	recs := []world.Record{
		{Kind: world.KindHTTP, Role: world.RoleGit, Method: "POST", Path: "/acme/demo.git/git-receive-pack"},
		{Kind: world.KindHTTP, Role: world.RoleNPM, Method: "GET", Path: "/@evil/stealer/-/stealer-6.6.6.tgz"},
		{Kind: world.KindConn, Role: world.RoleEvil, Proto: "tcp", Local: "198.19.1.66:443"},
		{Kind: world.KindPacket, Role: world.RoleCanary, Proto: "udp", Dst: "198.19.1.99"},
	}
	got := summarize(testView(), recs)
	for _, want := range []string{
		"LEAK: a git push arrived (1 records)",
		"LEAK: a denied package was requested (1 records)",
		"LEAK: a leak: something reached the evil server or the canary (2 records)",
		"evil.test                  connection to 198.19.1.66:443\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "ok:") {
		t.Errorf("a check passed despite the records:\n%s", got)
	}
}
