package preview

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A link token is exchanged once for a host-only, HttpOnly, Secure, Lax
// cookie by a redirect to the URL without it; the cookie then reaches the
// app, which never sees the cookie or the token.
func TestLinkExchangedForCookie(t *testing.T) {
	r := newRig(t, Limits{})
	_, port := app(t)
	p, links := r.expose(t, port)
	c := r.client()
	resp, _ := get(t, c, links["alice"]+"&x=1")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("status %d, want 303", resp.StatusCode)
	}
	if resp.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Error("the token's redirect may leak it in a Referer")
	}
	if loc := resp.Header.Get("Location"); loc != "/?x=1" {
		t.Errorf("redirect to %q, want /?x=1 (token removed)", loc)
	}
	var ck *http.Cookie
	for _, x := range resp.Cookies() {
		if x.Name == cookieName {
			ck = x
		}
	}
	if ck == nil || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteLaxMode || ck.Domain != "" || ck.Path != "/" {
		t.Fatalf("cookie %+v: want HttpOnly, Secure, SameSite=Lax, host-only, Path=/", ck)
	}
	resp, body := get(t, c, p.URL+"?x=1", "Cookie", cookieName+"="+ck.Value+"; mine=2")
	if resp.StatusCode != 200 || body != "app GET /?x=1" {
		t.Fatalf("with cookie: %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Seen-Cookie"); got != "mine=2" {
		t.Errorf("app saw cookies %q, want only its own", got)
	}
	if got := resp.Header.Get("X-Seen-Host"); got != hostOf(p.URL) {
		t.Errorf("app saw host %q, want %q", got, hostOf(p.URL))
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("proto %s, want HTTP/2 through the listener", resp.Proto)
	}
	if len(r.ev.stage("opened")) != 1 || len(r.ev.stage("created")) != 1 {
		t.Errorf("events: %+v", r.ev.of("preview"))
	}
	// Replayed: refused, and nothing reaches the app.
	resp, body = get(t, c, links["alice"])
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "app ") {
		t.Errorf("replayed link: %d %q, want 401", resp.StatusCode, body)
	}
	if rs := r.ev.stage("refused"); len(rs) != 1 || !strings.Contains(rs[0].Reason, "already used") {
		t.Errorf("refused events %+v", rs)
	}
}

// Every request is an ingress event with the query redacted and bytes.
func TestIngressEvent(t *testing.T) {
	r := newRig(t, Limits{})
	_, port := app(t)
	p, links := r.expose(t, port)
	ck := r.open(t, links["alice"])
	get(t, r.client(), p.URL+"a/b?secret=hunter2", "Cookie", ck)
	var found bool
	for _, e := range r.ev.of("ingress") {
		in := e.Ingress
		if strings.Contains(in.Path, "hunter2") {
			t.Errorf("query logged: %q", in.Path)
		}
		if in.Path == "/a/b?[REDACTED]" {
			found = true
			if e.ID != p.ID || e.Sandbox != "sb1" || in.Principal != "alice" || in.Status != 200 || in.BytesDown == 0 ||
				in.Client == "" || in.Method != "GET" || in.Port != int(port) || e.Verdict != "allow" {
				t.Errorf("ingress %+v %+v", e, in)
			}
		}
	}
	if !found {
		t.Fatalf("no ingress event for /a/b: %+v", r.ev.of("ingress"))
	}
}

// A cookie, a link or a bearer token of preview A never opens preview B;
// forged, tampered and expired tokens are refused.
func TestTokensBoundToPreview(t *testing.T) {
	r := newRig(t, Limits{})
	_, port := app(t)
	a, la := r.expose(t, port)
	b, lb := r.expose(t, port, "bob")
	ckA := r.open(t, la["alice"])
	c := r.client()
	check := func(name string, want int, u string, hdr ...string) {
		t.Helper()
		resp, body := get(t, c, u, hdr...)
		if resp.StatusCode != want || (want != 200 && strings.Contains(body, "app ")) {
			t.Errorf("%s: %d %q, want %d", name, resp.StatusCode, body, want)
		}
	}
	check("cookie of A on A", 200, a.URL, "Cookie", ckA)
	check("cookie of A on B", 401, b.URL, "Cookie", ckA)
	tokB := strings.SplitN(lb["bob"], "=", 2)[1]
	check("token of B on A", 401, a.URL+"?"+tokenParam+"="+tokB)
	check("alice's bearer on bob's", 403, b.URL, "Authorization", "Bearer tok-alice")
	check("bob's bearer on bob's", 200, b.URL, "Authorization", "Bearer tok-bob")
	check("admin bearer", 200, b.URL, "Authorization", "Bearer tok-root")
	check("unknown bearer", 401, b.URL, "Authorization", "Bearer nope")
	check("nothing", 401, a.URL)
	forged := sign([]byte(strings.Repeat("x", 32)), claim{Kind: kindLink, Preview: a.ID, Principal: "alice", Expires: time.Now().Add(time.Hour), Nonce: "n"})
	check("forged", 401, a.URL+"?"+tokenParam+"="+forged)
	good := strings.SplitN(r.fresh(t, a, "alice"), "=", 2)[1]
	pl, mc, _ := strings.Cut(good, ".")
	raw, _ := b64.DecodeString(pl)
	tampered := b64.EncodeToString([]byte(strings.Replace(string(raw), "|alice|", "|mallory|", 1))) + "." + mc
	check("tampered", 401, a.URL+"?"+tokenParam+"="+tampered)
	check("cookie as link", 401, a.URL+"?"+tokenParam+"="+strings.TrimPrefix(ckA, cookieName+"="))
	link := r.fresh(t, a, "alice")
	spent := r.fresh(t, a, "alice")
	r.open(t, spent)
	r.advance(16 * time.Minute) // past the link ttl, inside the preview's
	check("expired link", 401, link)
	check("spent link replayed after its expiry", 401, spent)
	for _, want := range []string{"another preview", "signature", "expired", "wrong kind", "not among"} {
		if !refusedWith(r, want) {
			t.Errorf("no refused event naming %q", want)
		}
	}
}

func (r *rig) fresh(t *testing.T, p Preview, who string) string {
	l, err := r.m.Link(p.Sandbox, p.ID, who)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func refusedWith(r *rig, s string) bool {
	for _, e := range r.ev.stage("refused") {
		if strings.Contains(e.Reason, s) {
			return true
		}
	}
	return false
}

// The app cannot set a cookie for another domain or overwrite ours.
func TestAppCookiesForOtherDomainsStripped(t *testing.T) {
	r := newRig(t, Limits{})
	_, port := app(t)
	p, links := r.expose(t, port)
	resp, _ := get(t, r.client(), p.URL+"cookies", "Cookie", r.open(t, links["alice"]))
	got := resp.Header.Values("Set-Cookie")
	if len(got) != 1 || got[0] != "own=1; Path=/" {
		t.Errorf("Set-Cookie %q, want only the host-only own=1", got)
	}
}
