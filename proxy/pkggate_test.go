package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"airlock/audit"
	"airlock/certs"
	"airlock/e2e/world/pkgreg"
	"airlock/policies"
)

// The package gate's test world: a fake registry (pkgreg) on loopback
// TLS under three names, each a registries category: enforce, audit and
// fail-open. Versions have controlled ages: the gate is 72h.

const day = 24 * time.Hour

var gateNPM = []pkgreg.Package{
	{Name: "gate-demo", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day}, {Version: "1.1.0", Age: 10 * day}, {Version: "2.0.0", Age: time.Hour}}},
	{Name: "gate-scripts", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day},
		{Version: "1.1.0", Age: 10 * day, Script: "node -e \"require('fs').writeFileSync('SCRIPT-RAN','x')\""}}},
	{Name: "gate-mal", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day}, {Version: "1.0.1", Age: 20 * day}}},
	{Name: "gate-evil", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day}}},
	{Name: "gate-exempt", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day}, {Version: "3.0.0", Age: time.Hour}}},
	{Name: "gate-notime", Versions: []pkgreg.Version{{Version: "1.0.0", NoTime: true}}},
	{Name: "gate-tampered", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day, Tamper: true}}},
	{Name: "gate-tampered-big", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day, Tamper: true, Pad: 2 << 20}}},
	{Name: "@scope/gate-scoped", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day}, {Version: "1.0.1", Age: time.Minute}}},
}

var gatePy = []pkgreg.Package{
	{Name: "gate-demo", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day}, {Version: "2.0.0", Age: time.Hour}}},
	{Name: "gate-tampered", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day, Tamper: true}}},
	{Name: "gate-src", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day, Sdist: true}, {Version: "1.1.0", Age: 10 * day, Sdist: true, NoWheel: true}}},
	{Name: "gate_mal", Versions: []pkgreg.Version{{Version: "1.0.0", Age: 30 * day}, {Version: "1.1.0", Age: 20 * day}}},
}

var gateNames = []string{"registry.example.test", "audit.example.test", "open.example.test", "scripts.example.test", "locked.example.test", "routed.example.test", "sdist.example.test", "plain.example.test"}

const gatePolicy = `version = 1

[categories.registries]
hosts = ["registry.example.test"]
ports = [REGPORT]
min_release_age = "72h"
release_age_exempt = ["npm:gate-exempt"]
install_scripts = "deny"

[categories.audited]
kind = "registries"
mode = "audit"
hosts = ["audit.example.test"]
ports = [REGPORT]
min_release_age = "3d"

[categories.open]
kind = "registries"
hosts = ["open.example.test"]
ports = [REGPORT]
min_release_age = "72h"
unknown_release_age = "allow"

[categories.scripts]
kind = "registries"
hosts = ["scripts.example.test"]
ports = [REGPORT]
install_scripts = "ask"

[categories.routed]
kind = "registries"
hosts = ["routed.example.test"]
ports = [REGPORT]
routes = [{ methods = ["GET"], path = "/gate-demo/-/*" }]
min_release_age = "72h"

[categories.sdists]
kind = "registries"
hosts = ["sdist.example.test"]
ports = [REGPORT]
sdists = "deny"

[categories.plain]
kind = "registries"
hosts = ["plain.example.test"]
ports = [REGPORT]
`

type gateEnv struct {
	*env
	reg     *pkgreg.Registry
	regPort uint16
	regCA   []byte // PEM of the CA the registry's certificate is from
	dir     string
	approve atomic.Bool // what the approver answers
}

type advisoriesFunc func() *policies.Advisories

func (f advisoriesFunc) Advisories() *policies.Advisories { return f() }

// newGateEnv starts the registry and a proxy in front of it.
func newGateEnv(t *testing.T) *gateEnv { return newGateEnvWith(t, gateOpts{}) }

// gateOpts change the gate's world: more packages, a package cache, a
// tenant the sandbox belongs to, another policy.
type gateOpts struct {
	npm, py []pkgreg.Package
	cache   *PackageCache
	tenant  func() string
	policy  func(base Decider) Decider
	latency time.Duration            // the registry answers this much later (a distant registry)
	noOSV   bool                     // no malicious-package denylist
	lock    func() *policies.LockSet // the sandbox's lockfiles
	extra   map[string]http.Handler  // more world paths (mux patterns)
}

func newGateEnvWith(t *testing.T, o gateOpts) *gateEnv {
	t.Helper()
	_, caCert, caKey, caDER := testCA(t, "registry test CA")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	reg, err := pkgreg.New(fmt.Sprintf("https://registry.example.test:%d", port), append(o.npm, gateNPM...), append(o.py, gatePy...))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", reg)
	mux.Handle("/api/npm/npm-remote/", http.StripPrefix("/api/npm/npm-remote", reg))
	mux.Handle("/repository/pypi-proxy/", http.StripPrefix("/repository/pypi-proxy", reg))
	for pat, h := range o.extra {
		mux.Handle(pat, h)
	}
	mux.HandleFunc("/gate-corrupt", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		io.WriteString(rw, `{"name":"gate-corrupt","versions":{"1.0.0":`)
	})
	var h http.Handler = mux
	if o.latency > 0 {
		h = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { time.Sleep(o.latency); mux.ServeHTTP(rw, r) })
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{leafFor(t, caCert, caKey, gateNames)}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })

	parsed, err := policies.Parse("gate.toml", []byte(strings.ReplaceAll(gatePolicy, "REGPORT", fmt.Sprint(port))))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	adv, err := policies.LoadOSV([]string{"testdata/osv"})
	if err != nil {
		t.Fatal(err)
	}
	pol := policies.Bind(parsed, worldOperator)
	ca, err := certs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	res := fakeResolver{}
	for _, n := range gateNames {
		res[n] = []netip.Addr{lo}
	}
	e := &env{t: t, ca: ca, ev: &recorder{}, dials: &dialLog{}, policy: pol}
	g := &gateEnv{env: e, reg: reg, regPort: port, regCA: pemCert(caDER)}
	p, err := New(Config{
		CA: ca, Resolver: res, Emitter: e.ev, ExtraCAPEM: [][]byte{g.regCA}, RootCAs: x509.NewCertPool(),
		Identify: IdentifierFunc(func(a netip.Addr) (Sandbox, bool) {
			sb := Sandbox{ID: "sb1", Policy: pol}
			if o.tenant != nil {
				sb.Tenant = o.tenant()
			}
			if o.policy != nil {
				sb.Policy = o.policy(pol)
			}
			if o.lock != nil {
				sb.Lock = o.lock()
			}
			return sb, a == lo
		}),
		Advisories: advisoriesFunc(func() *policies.Advisories {
			if o.noOSV {
				return nil
			}
			return adv
		}),
		PackageCache: o.cache,
		AskTimeout:   300 * time.Millisecond,
		Approver: ApproverFunc(func(context.Context, Hold) (bool, error) {
			return g.approve.Load(), nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	eln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.explicit = eln.Addr().String()
	go p.ServeExplicit(eln)
	t.Cleanup(func() { p.Close() })
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	g.dir = dir
	return g
}

func (g *gateEnv) regURL(host, path string) string {
	return fmt.Sprintf("https://%s:%d%s", host, g.regPort, path)
}

// get fetches through the explicit proxy.
func (g *gateEnv) get(t *testing.T, url, accept string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := g.explicitClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// httpEvent is the last http event for a path.
func (g *gateEnv) httpEvent(t *testing.T, path string) audit.Event {
	t.Helper()
	return g.ev.waitFor(t, "http event for "+path, func(e audit.Event) bool {
		return e.Kind == audit.KindHTTP && e.HTTP != nil && e.HTTP.Path == path && e.HTTP.Status != 0
	})
}

// hostEvent is the http event for a host and path.
func (g *gateEnv) hostEvent(t *testing.T, host, path string) audit.Event {
	t.Helper()
	return g.ev.waitFor(t, "http event for "+host+path, func(e audit.Event) bool {
		return e.Kind == audit.KindHTTP && e.HTTP != nil && e.HTTP.Host == host && e.HTTP.Path == path && e.HTTP.Status != 0
	})
}

func gatedVersions(e audit.Event) map[string]string {
	out := map[string]string{}
	if e.HTTP.Package != nil {
		for _, gv := range e.HTTP.Package.Gated {
			out[gv.Version] = gv.Reason
		}
	}
	return out
}

// TestPackageGateNPMPackument: the packument a client gets lists no
// version younger than the gate, none with an install script, none an
// advisory marks; latest moves to the newest mature version; the
// proxy asked upstream for the full packument although the client
// asked for the abbreviated one.
func TestPackageGateNPMPackument(t *testing.T) {
	g := newGateEnv(t)
	resp, body := g.get(t, g.regURL("registry.example.test", "/gate-demo"), "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var doc struct {
		DistTags map[string]string          `json:"dist-tags"`
		Versions map[string]json.RawMessage `json:"versions"`
		Time     map[string]string          `json:"time"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("rewritten packument is not JSON: %v\n%s", err, body)
	}
	if _, ok := doc.Versions["2.0.0"]; ok || len(doc.Versions) != 2 || doc.DistTags["latest"] != "1.1.0" {
		t.Errorf("versions %v, dist-tags %v: want 1.0.0 and 1.1.0, latest 1.1.0", keys(doc.Versions), doc.DistTags)
	}
	if _, ok := doc.Time["2.0.0"]; ok {
		t.Errorf("time still names 2.0.0: %v", doc.Time)
	}
	hits := g.reg.Hits()
	if len(hits) == 0 || hits[len(hits)-1].Accept != "application/json" {
		t.Errorf("upstream requests %+v: want the full packument asked for", hits)
	}
	e := g.httpEvent(t, "/gate-demo")
	if why := gatedVersions(e)["2.0.0"]; !strings.HasPrefix(why, "package_too_new: gate-demo@2.0.0 was published ") {
		t.Errorf("event gated %v: want 2.0.0 package_too_new", gatedVersions(e))
	}
	if e.Verdict != "allow" || !strings.Contains(e.Reason, "hid 1 of 3 versions") {
		t.Errorf("event verdict %s reason %q", e.Verdict, e.Reason)
	}
	for name, want := range map[string]string{"/gate-scripts": "install_script: ", "/gate-mal": "osv:MAL-2026-0001: "} {
		resp, body := g.get(t, g.regURL("registry.example.test", name), "")
		if resp.StatusCode != 200 || strings.Contains(body, `"1.1.0"`) || strings.Contains(body, `"1.0.1"`) {
			t.Errorf("%s: status %d body %s", name, resp.StatusCode, body)
		}
		found := false
		for _, why := range gatedVersions(g.httpEvent(t, name)) {
			found = found || strings.HasPrefix(why, want)
		}
		if !found {
			t.Errorf("%s: event gated %v, want a reason %q", name, gatedVersions(g.httpEvent(t, name)), want)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestPackageGateDownloadDenied: a direct download of a version the gate
// hides is refused with the reason, naming the publish time.
func TestPackageGateDownloadDenied(t *testing.T) {
	g := newGateEnv(t)
	published := g.reg.Published(gateNPM[0].Versions[2]).Format(time.RFC3339)
	cases := []struct {
		name, path, rule, reason string
	}{
		{"npm too new", "/gate-demo/-/gate-demo-2.0.0.tgz", "categories.registries.min_release_age", "package_too_new: gate-demo@2.0.0 was published " + published},
		{"npm scoped too new", "/@scope/gate-scoped/-/gate-scoped-1.0.1.tgz", "categories.registries.min_release_age", "package_too_new: @scope/gate-scoped@1.0.1"},
		{"npm install script", "/gate-scripts/-/gate-scripts-1.1.0.tgz", "categories.registries.install_scripts", "install_script: gate-scripts@1.1.0"},
		{"npm malicious", "/gate-mal/-/gate-mal-1.0.1.tgz", "packages.osv", "osv:MAL-2026-0001: Malicious code in gate-mal"},
		{"npm no publish time", "/gate-notime/-/gate-notime-1.0.0.tgz", "categories.registries.unknown_release_age", "no_publish_time: "},
		{"pypi too new", "/packages/" + pkgreg.WheelName("gate-demo", "2.0.0"), "categories.registries.min_release_age", "package_too_new: gate-demo@2.0.0 was published " + published},
		{"pypi malicious", "/packages/" + pkgreg.WheelName("gate_mal", "1.1.0"), "packages.osv", "osv:MAL-2026-0002"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := g.get(t, g.regURL("registry.example.test", c.path), "")
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, c.reason) || resp.Header.Get(HeaderRule) != c.rule {
				t.Fatalf("status %d rule %q body %q: want 403 by %s with %q", resp.StatusCode, resp.Header.Get(HeaderRule), body, c.rule, c.reason)
			}
			e := g.httpEvent(t, c.path)
			if e.Verdict != "deny" || e.Rule == "" || !strings.HasPrefix(e.Rule, c.rule) || !strings.Contains(e.Reason, c.reason) {
				t.Errorf("event verdict %s rule %s reason %q", e.Verdict, e.Rule, e.Reason)
			}
		})
	}
	for _, ok := range []string{"/gate-demo/-/gate-demo-1.1.0.tgz", "/gate-exempt/-/gate-exempt-3.0.0.tgz", "/packages/" + pkgreg.WheelName("gate-demo", "1.0.0")} {
		if resp, body := g.get(t, g.regURL("registry.example.test", ok), ""); resp.StatusCode != 200 {
			t.Errorf("%s: status %d %s", ok, resp.StatusCode, body)
		}
	}
	if e := g.httpEvent(t, "/gate-demo/-/gate-demo-1.1.0.tgz"); e.HTTP.Package.Published != g.reg.Published(gateNPM[0].Versions[1]).Format(time.RFC3339) {
		t.Errorf("allowed download's event: published %q", e.HTTP.Package.Published)
	}
}

// TestPackageGateAuditMode: an audit category changes nothing on the
// wire and records what enforce would have hidden or denied.
func TestPackageGateAuditMode(t *testing.T) {
	g := newGateEnv(t)
	resp, body := g.get(t, g.regURL("audit.example.test", "/gate-demo"), "")
	if resp.StatusCode != 200 || !strings.Contains(body, `"2.0.0"`) {
		t.Fatalf("audit mode changed the packument: %d %s", resp.StatusCode, body)
	}
	e := g.httpEvent(t, "/gate-demo")
	if e.Verdict != "audit" || !e.WouldDeny || !strings.HasPrefix(gatedVersions(e)["2.0.0"], "package_too_new") {
		t.Errorf("event verdict %s would_deny %v gated %v", e.Verdict, e.WouldDeny, gatedVersions(e))
	}
	resp, _ = g.get(t, g.regURL("audit.example.test", "/gate-demo/-/gate-demo-2.0.0.tgz"), "")
	if resp.StatusCode != 200 {
		t.Fatalf("audit mode denied the download: %d", resp.StatusCode)
	}
	e = g.httpEvent(t, "/gate-demo/-/gate-demo-2.0.0.tgz")
	if e.Verdict != "audit" || !e.WouldDeny || !strings.HasPrefix(e.Reason, "package_too_new") || e.Rule != "categories.audited.min_release_age (gate.toml:15:1)" {
		t.Errorf("event verdict %s would_deny %v rule %q reason %q", e.Verdict, e.WouldDeny, e.Rule, e.Reason)
	}
}

// TestPackageGateNoPublishTime: without a publish time the category
// decides: fail closed (hidden) by default, open with a warning.
func TestPackageGateNoPublishTime(t *testing.T) {
	g := newGateEnv(t)
	_, body := g.get(t, g.regURL("registry.example.test", "/gate-notime"), "")
	if strings.Contains(body, `"1.0.0"`) {
		t.Errorf("fail-closed category kept a version without a publish time: %s", body)
	}
	_, body = g.get(t, g.regURL("open.example.test", "/gate-notime"), "")
	if !strings.Contains(body, `"1.0.0"`) {
		t.Errorf("fail-open category hid it: %s", body)
	}
	if e := g.hostEvent(t, "open.example.test", "/gate-notime"); !strings.HasPrefix(e.HTTP.Package.Warning, "no_publish_time: 1 versions") {
		t.Errorf("fail-open event warning %q", e.HTTP.Package.Warning)
	}
	resp, _ := g.get(t, g.regURL("open.example.test", "/gate-notime/-/gate-notime-1.0.0.tgz"), "")
	if resp.StatusCode != 200 {
		t.Errorf("fail-open download: %d", resp.StatusCode)
	}
}

// TestPackageGatePyPIIndex: the simple page (HTML and PEP 691 JSON) and
// the JSON API list no hidden version.
func TestPackageGatePyPIIndex(t *testing.T) {
	g := newGateEnv(t)
	for _, accept := range []string{"text/html", "application/vnd.pypi.simple.v1+json"} {
		resp, body := g.get(t, g.regURL("registry.example.test", "/simple/gate-demo/"), accept)
		if resp.StatusCode != 200 || strings.Contains(body, "2.0.0") || !strings.Contains(body, "gate_demo-1.0.0") {
			t.Errorf("%s: status %d body %s", accept, resp.StatusCode, body)
		}
	}
	resp, body := g.get(t, g.regURL("registry.example.test", "/simple/gate-mal/"), "text/html")
	if resp.StatusCode != 200 || strings.Contains(body, "1.1.0") || !strings.Contains(body, "gate_mal-1.0.0") {
		t.Errorf("html with an advisory: status %d body %s", resp.StatusCode, body)
	}
	_, body = g.get(t, g.regURL("registry.example.test", "/pypi/gate-demo/json"), "")
	var doc struct {
		Info     map[string]any             `json:"info"`
		Releases map[string]json.RawMessage `json:"releases"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || doc.Info["version"] != "1.0.0" || len(doc.Releases) != 1 {
		t.Errorf("pypi json: %v %s", err, body)
	}
}

// TestPackageGateCorruptMetadata: metadata the gate cannot read is
// refused, not passed on unfiltered.
func TestPackageGateCorruptMetadata(t *testing.T) {
	g := newGateEnv(t)
	resp, body := g.get(t, g.regURL("registry.example.test", "/gate-corrupt"), "")
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(HeaderRule) != rulePackageMeta || !strings.Contains(body, "npm packument") {
		t.Errorf("status %d rule %q body %q", resp.StatusCode, resp.Header.Get(HeaderRule), body)
	}
}

// TestPackageGateInstallScriptsAsk: with install_scripts = "ask" a
// version with an install script stays listed and its download waits for
// a human: approved, it is fetched; not, it is refused.
func TestPackageGateInstallScriptsAsk(t *testing.T) {
	g := newGateEnv(t)
	_, body := g.get(t, g.regURL("scripts.example.test", "/gate-scripts"), "")
	if !strings.Contains(body, `"1.1.0"`) {
		t.Fatalf("ask hid the version: %s", body)
	}
	path := "/gate-scripts/-/gate-scripts-1.1.0.tgz"
	resp, body := g.get(t, g.regURL("scripts.example.test", path), "")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRule) != ruleAsk {
		t.Fatalf("unapproved: status %d rule %q %s", resp.StatusCode, resp.Header.Get(HeaderRule), body)
	}
	held := g.ev.waitFor(t, "approval held", func(e audit.Event) bool {
		return e.Kind == audit.KindApproval && strings.HasPrefix(e.Reason, "install_script: gate-scripts@1.1.0")
	})
	if held.Rule != "categories.scripts.install_scripts (gate.toml:28:1)" {
		t.Errorf("held by %q", held.Rule)
	}
	g.approve.Store(true)
	if resp, body = g.get(t, g.regURL("scripts.example.test", path), ""); resp.StatusCode != 200 {
		t.Errorf("approved: status %d %s", resp.StatusCode, body)
	}
	if resp, _ = g.get(t, g.regURL("scripts.example.test", "/gate-scripts/-/gate-scripts-1.0.0.tgz"), ""); resp.StatusCode != 200 {
		t.Errorf("a version without a script: %d", resp.StatusCode)
	}
}

// TestPackageGateMirrorLayouts: the gate works for a registry under an
// Artifactory-style /api/npm/REPO/ or a Nexus-style /repository/REPO/
// prefix: the metadata there is rewritten, and a download's publish
// time is looked up under the same prefix.
func TestPackageGateMirrorLayouts(t *testing.T) {
	g := newGateEnv(t)
	_, body := g.get(t, g.regURL("registry.example.test", "/api/npm/npm-remote/gate-demo"), "")
	if strings.Contains(body, `"2.0.0"`) || !strings.Contains(body, `"1.1.0"`) {
		t.Errorf("artifactory packument: %s", body)
	}
	_, body = g.get(t, g.regURL("registry.example.test", "/repository/pypi-proxy/simple/gate-demo/"), "text/html")
	if strings.Contains(body, "2.0.0") || !strings.Contains(body, "gate_demo-1.0.0") {
		t.Errorf("nexus simple page: %s", body)
	}
	// A fresh proxy: no metadata seen yet, so the download's check
	// fetches it under the prefix.
	g = newGateEnv(t)
	for _, p := range []string{"/api/npm/npm-remote/gate-demo/-/gate-demo-2.0.0.tgz", "/repository/pypi-proxy/packages/" + pkgreg.WheelName("gate-demo", "2.0.0")} {
		resp, body := g.get(t, g.regURL("registry.example.test", p), "")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "package_too_new: gate-demo@2.0.0 was published") {
			t.Errorf("%s: %d %s", p, resp.StatusCode, body)
		}
	}
	resp, body := g.get(t, g.regURL("registry.example.test", "/api/npm/npm-remote/gate-demo/-/gate-demo-1.1.0.tgz"), "")
	if resp.StatusCode != 200 {
		t.Errorf("mature download under a prefix: %d %s", resp.StatusCode, body)
	}
}

// TestPackageGateEveryVersionMalicious: an advisory for every version
// leaves a packument with no version to install.
func TestPackageGateEveryVersionMalicious(t *testing.T) {
	g := newGateEnv(t)
	_, body := g.get(t, g.regURL("registry.example.test", "/gate-evil"), "")
	var doc struct {
		DistTags map[string]string          `json:"dist-tags"`
		Versions map[string]json.RawMessage `json:"versions"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil || len(doc.Versions) != 0 || len(doc.DistTags) != 0 {
		t.Errorf("%v %s", err, body)
	}
}

// TestPackageGateTamperedArtifact: an artifact whose bytes do not match
// the digest the registry's metadata gives is never delivered whole: the
// download is cut before its last byte, and the event says why. With
// and without the metadata seen first, npm and PyPI (HTML and JSON
// digests).
func TestPackageGateTamperedArtifact(t *testing.T) {
	g := newGateEnv(t)
	tgz := "/gate-tampered/-/gate-tampered-1.0.0.tgz"
	whl := "/packages/" + pkgreg.WheelName("gate-tampered", "1.0.0")
	for _, c := range []struct {
		name, meta, accept, path string
		inBody                   bool // big enough that the head is sent before the cut
	}{
		{"npm, metadata fetched by the gate", "", "", tgz, false},
		{"npm, after the packument", "/gate-tampered", "", tgz, false},
		{"npm, 2 MiB: cut in the body", "/gate-tampered-big", "", "/gate-tampered-big/-/gate-tampered-big-1.0.0.tgz", true},
		{"pypi, metadata fetched by the gate", "", "", whl, false},
		{"pypi, after the html page", "/simple/gate-tampered/", "text/html", whl, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGateEnv(t)
			if c.meta != "" {
				g.get(t, g.regURL("registry.example.test", c.meta), c.accept)
			}
			req, _ := http.NewRequest(http.MethodGet, g.regURL("registry.example.test", c.path), nil)
			// Either the response breaks off before its head or in its
			// body; it never ends as if complete.
			resp, err := g.explicitClient().Do(req)
			if err == nil {
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil {
					t.Fatalf("the tampered artifact arrived whole (%d bytes, status %d)", len(body), resp.StatusCode)
				}
				t.Logf("cut after %d bytes: %v", len(body), err)
			} else if c.inBody {
				t.Errorf("the response broke off before its head: %v", err)
			}
			e := g.httpEvent(t, c.path)
			if e.Verdict != "deny" || e.Rule != ruleIntegrity || !strings.HasPrefix(e.Reason, "integrity_mismatch: gate-tampered") || !strings.Contains(e.Reason, "@1.0.0 does not match the registry's sha") {
				t.Errorf("event verdict %s rule %s reason %q", e.Verdict, e.Rule, e.Reason)
			}
		})
	}
	// An untampered artifact is checked and delivered whole.
	resp, body := g.get(t, g.regURL("registry.example.test", "/gate-demo/-/gate-demo-1.1.0.tgz"), "")
	e := g.httpEvent(t, "/gate-demo/-/gate-demo-1.1.0.tgz")
	if resp.StatusCode != 200 || len(body) == 0 || !strings.HasPrefix(e.HTTP.Package.Integrity, "sha512-") || e.Verdict != "allow" {
		t.Errorf("status %d, %d bytes, event %s integrity %q", resp.StatusCode, len(body), e.Verdict, e.HTTP.Package.Integrity)
	}
}

// TestPackageGateLookupObeysPolicy: the metadata the gate fetches for a
// download is decided by the sandbox's policy like the sandbox's own
// requests: here the policy does not allow the packument, so no publish
// time is known and the category fails closed.
func TestPackageGateLookupObeysPolicy(t *testing.T) {
	g := newGateEnv(t)
	if resp, _ := g.get(t, g.regURL("routed.example.test", "/gate-demo"), ""); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the packument is allowed (%d): the test proves nothing", resp.StatusCode)
	}
	before := len(g.reg.Hits())
	resp, body := g.get(t, g.regURL("routed.example.test", "/gate-demo/-/gate-demo-1.1.0.tgz"), "")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "no_publish_time: ") {
		t.Errorf("status %d %s", resp.StatusCode, body)
	}
	if hits := g.reg.Hits()[before:]; len(hits) != 0 {
		t.Errorf("the gate fetched what the policy denies: %+v", hits)
	}
}

// TestPackageGateSdists: with sdists = "deny" the index lists no source
// distribution and a download of one is refused; pip installs the
// newest version that has a wheel.
func TestPackageGateSdists(t *testing.T) {
	g := newGateEnv(t)
	for _, accept := range []string{"text/html", "application/vnd.pypi.simple.v1+json"} {
		_, body := g.get(t, g.regURL("sdist.example.test", "/simple/gate-src/"), accept)
		if strings.Contains(body, ".tar.gz") || !strings.Contains(body, pkgreg.WheelName("gate-src", "1.0.0")) {
			t.Errorf("%s: %s", accept, body)
		}
	}
	if e := g.hostEvent(t, "sdist.example.test", "/simple/gate-src/"); !strings.HasPrefix(gatedVersions(e)["1.1.0"], "sdist: gate-src-1.1.0.tar.gz") {
		t.Errorf("gated %v", gatedVersions(e))
	}
	_, body := g.get(t, g.regURL("sdist.example.test", "/pypi/gate-src/json"), "")
	if strings.Contains(body, ".tar.gz") {
		t.Errorf("pypi json: %s", body)
	}
	p := "/packages/" + pkgreg.SdistName("gate-src", "1.1.0")
	resp, body := g.get(t, g.regURL("sdist.example.test", p), "")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(HeaderRule) != "categories.sdists.sdists" || !strings.Contains(body, "sdist: gate-src@1.1.0 is a source distribution") {
		t.Errorf("sdist download: %d %q %s", resp.StatusCode, resp.Header.Get(HeaderRule), body)
	}
	requireTool(t, "python3", "-m", "pip", "--version")
	target := filepath.Join(g.dir, "py")
	out, err := g.run(t, g.dir, "python3", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
		"--target", target, "--index-url", g.regURL("sdist.example.test", "/simple/"), "--proxy", "http://"+g.explicit,
		"--cert", filepath.Join(g.dir, "ca.pem"), "gate-src")
	if err != nil {
		t.Fatalf("pip install: %v\n%s", err, out)
	}
	if m, _ := filepath.Glob(filepath.Join(target, "gate_src-1.0.0.dist-info")); len(m) != 1 {
		t.Errorf("pip did not install gate-src 1.0.0 from its wheel:\n%s", out)
	}
}

// TestPackageGateRangeNotVerifiable: a checked download is asked for
// whole (the client's Range is dropped), and a partial answer the
// digest cannot cover is refused.
func TestPackageGateRangeNotVerifiable(t *testing.T) {
	g := newGateEnv(t)
	req, _ := http.NewRequest(http.MethodGet, g.regURL("registry.example.test", "/gate-demo/-/gate-demo-1.1.0.tgz"), nil)
	req.Header.Set("Range", "bytes=0-9")
	resp, err := g.explicitClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := g.reg.Artifact(pkgreg.NPMTarballPath("gate-demo", "1.1.0")); resp.StatusCode != 200 || len(body) != len(want) {
		t.Errorf("status %d, %d bytes: want the whole, checked artifact (%d bytes)", resp.StatusCode, len(body), len(want))
	}
}
