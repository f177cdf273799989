package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"airlock/audit"
	"airlock/policies"
	"airlock/proxy/internal/pkgmeta"
)

// The package gate: a registries category's release-age and
// install-script rules (policies.PackageGate) and the appliance's
// malicious-package denylist (Config.Advisories). Metadata is rewritten
// so that resolvers never see a version the gate denies (pkgmeta), and a
// download of such a version is refused with the reason.

// Advisories is the appliance's malicious-package denylist; it returns
// the current list (nil: none), so a reload is seen by the next request.
type Advisories interface {
	Advisories() *policies.Advisories
}

// rulePackageMeta names refusals of metadata the gate cannot read.
const rulePackageMeta = "proxy.package-meta"

type gateKind uint8

const (
	gateNPMMeta     gateKind = iota + 1 // an npm packument
	gatePySimple                        // a PyPI simple project page (HTML or JSON)
	gatePyJSON                          // /pypi/NAME/json
	gateDownload                        // a version: tarball, wheel, sdist, /pypi/NAME/VER/json, .crate, .deb
	gateCratesIndex                     // a Cargo registry index file (sparse: /ab/cd/NAME)
	gateDebIndex                        // a Debian Packages index: read, passed on unchanged (pkgdeb.go)
)

// gateState is a metadata request whose response the gate rewrites.
type gateState struct {
	g      *policies.PackageGate // nil: only the denylist applies
	adv    *policies.Advisories
	lock   *policies.LockSet // the category's lockfiles, nil when none
	sbLock *policies.LockSet // the sandbox's lockfiles, nil when none
	kind   gateKind
	mode   policies.Mode
	key    string // the version cache key: category|ecosystem|name

	metaKey   metaKey // the metadata cache key, when the package cache is on
	cacheOnly bool    // no gate rule applies: the cache alone watches
}

func (p *Proxy) advisories() *policies.Advisories {
	if p.cfg.Advisories == nil {
		return nil
	}
	return p.cfg.Advisories.Advisories()
}

// gateFor says whether the gate watches the request, and how.
func (p *Proxy) gateFor(x *exch, req *http.Request) *gateState {
	cat, pkg := x.v.Cat, x.pkg
	if cat == nil || cat.Kind != policies.KindRegistries || pkg.Ecosystem == "" || req.Method != http.MethodGet {
		return nil
	}
	gs := &gateState{g: cat.Gate(), adv: p.advisories(), lock: cat.Lock(), sbLock: x.sc.f.sb.Lock, mode: cat.Mode,
		key: cat.Name + "|" + pkg.Ecosystem + "|" + pkg.Name}
	if gs.g == nil && gs.adv.Len() == 0 && !gs.lock.Locks(pkg.Ecosystem) && !gs.sbLock.Locks(pkg.Ecosystem) {
		if p.cfg.PackageCache == nil {
			return nil
		}
		gs.cacheOnly = true
	}
	switch {
	case pkg.Version != "":
		gs.kind = gateDownload
	case pkg.Ecosystem == "npm":
		gs.kind = gateNPMMeta
	case pkg.Ecosystem == "pypi" && strings.Contains(x.path, "/simple/"):
		gs.kind = gatePySimple
	case pkg.Ecosystem == "pypi":
		gs.kind = gatePyJSON
	case pkg.Ecosystem == "crates":
		gs.kind = gateCratesIndex
	default:
		return nil
	}
	return gs
}

// gateRequest is the request side: a download of a version the gate
// denies is refused (or held, for an install script the category asks
// about); a metadata request is sent for the full, uncompressed,
// unconditional document, whose response gateResponse rewrites.
func (p *Proxy) gateRequest(x *exch, req *http.Request) *http.Response {
	if p.debIndexFor(x, req) {
		x.gate = &gateState{kind: gateDebIndex}
		req.Header.Set("Accept-Encoding", "identity")
		return nil
	}
	gs := p.gateFor(x, req)
	if gs == nil {
		return nil
	}
	if gs.kind == gateDownload {
		return p.gateDownload(x, req, gs)
	}
	if resp := p.metaCached(x, req, gs); resp != nil {
		return resp
	}
	x.gate = gs
	h := req.Header
	if gs.kind == gateNPMMeta {
		h.Set("Accept", "application/json") // the full packument: the abbreviated one has no "time"
	}
	h.Set("Accept-Encoding", "identity")
	h.Del("If-None-Match")
	h.Del("If-Modified-Since")
	return nil
}

func (p *Proxy) gateDownload(x *exch, req *http.Request, gs *gateState) *http.Response {
	pkg := x.pkg
	if x.v.WouldDeny && gs.sbLock != nil && x.v.Rule == gs.sbLock.Rule() {
		return nil // the sandbox's lockfiles do not list it (the policy decided; an audit category records it)
	}
	if a, ok := gs.adv.Match(pkg); ok {
		return p.gateVerdict(x, req, withGate(x.v, a.Verdict(gs.mode)))
	}
	locked := gs.lockDigests(pkg)
	var ver pkgmeta.Version
	switch {
	case pkg.Ecosystem == "debian":
		ver = p.debVersion(x) // a digest, never a publish time
	case !ageGated(pkg.Ecosystem):
	case gs.g != nil || p.cfg.PackageCache != nil && len(locked) == 0: // the gate's publish time, the digest the cache needs
		ver = p.versionInfo(x, req, gs)
	}
	if gs.g == nil || !ageGated(pkg.Ecosystem) && pkg.Ecosystem != "debian" {
		p.expectIntegrity(x, req, ver, locked)
		return p.cacheLookup(x, req)
	}
	vi := info(ver)
	x.evPkg.Published = fmtTime(vi.Published)
	gv := gs.g.Check(pkg, vi, time.Now())
	if gv.Warning != "" {
		x.evPkg.Warning = gv.Warning
		p.log.Warn("proxy: package gate failed open", "id", x.ev.e.ID, "sandbox", x.ev.e.Sandbox, "package", pkg.Name, "version", pkg.Version, "rule", gv.Rule.Name)
	}
	if gv.Action == policies.ActionAllow {
		p.expectIntegrity(x, req, ver, locked)
		return p.cacheLookup(x, req)
	}
	return p.gateVerdict(x, req, withGate(x.v, gv))
}

// ageGated: the ecosystems whose metadata the gate reads for a version's
// digest and publish time (a crates index gives pubtime only where the
// registry writes it; unknown_release_age decides the rest).
func ageGated(eco string) bool { return eco == "npm" || eco == "pypi" || eco == "crates" }

// withGate is the request's verdict v with the gate's verdict on its
// version in its place.
func withGate(v policies.Verdict, gv policies.GateVerdict) policies.Verdict {
	v.Action, v.WouldDeny, v.Rule, v.Reason = gv.Action, gv.WouldDeny, gv.Rule, gv.Reason
	return v
}

// gateVerdict applies a gate's verdict on a download: an audit is
// recorded and let through, an ask held, a deny refused.
func (p *Proxy) gateVerdict(x *exch, req *http.Request, v policies.Verdict) *http.Response {
	if v.Action == policies.ActionAsk {
		v = p.ask(x, x.sc.f, x.ev.e.ID, req.Method+" "+req.URL.String(), v)
	}
	x.ev.setVerdict(v)
	x.v = v
	if v.Action.Allows() {
		return nil
	}
	return p.refuse(&x.ev, req, http.StatusForbidden, v)
}

// versionInfo is what the registry says of the requested version: from
// metadata the gate saw lately, else fetched from the same registry
// (the packument, or PyPI's JSON API and then the JSON simple page).
func (p *Proxy) versionInfo(x *exch, req *http.Request, gs *gateState) pkgmeta.Version {
	if vs, ok := p.times.get(gs.key); ok {
		return vs[x.pkg.Version]
	}
	for _, f := range metaFetches(x.path, x.pkg) {
		body, ctype, err := p.sideFetch(x, req, f.path, f.accept)
		if err != nil {
			p.log.Debug("proxy: package gate lookup", "id", x.ev.e.ID, "path", f.path, "err", err)
			continue
		}
		vs, err := parseVersions(f.kind, ctype, body)
		if err != nil {
			p.log.Debug("proxy: package gate lookup", "id", x.ev.e.ID, "path", f.path, "err", err)
			continue
		}
		m := p.times.put(gs.key, vs)
		return m[x.pkg.Version]
	}
	return pkgmeta.Version{}
}

type metaFetch struct {
	path, accept string
	kind         gateKind
}

const (
	acceptNPM        = "application/json"
	acceptSimpleJSON = "application/vnd.pypi.simple.v1+json"
)

// metaFetches are the metadata documents that give a version's publish
// time, tried in order, on the registry of the download's path.
func metaFetches(p string, pkg policies.Package) []metaFetch {
	switch pkg.Ecosystem {
	case "npm":
		if i := strings.LastIndex(p, "/-/"); i > 0 {
			return []metaFetch{{p[:i], acceptNPM, gateNPMMeta}}
		}
	case "pypi":
		i := strings.Index(p, "/packages/")
		if j := strings.Index(p, "/pypi/"); i < 0 || j >= 0 && j < i {
			i = j
		}
		if i < 0 {
			return nil
		}
		pre := p[:i]
		return []metaFetch{{pre + "/pypi/" + pkg.Name + "/json", "application/json", gatePyJSON},
			{pre + "/simple/" + pkg.Name + "/", acceptSimpleJSON, gatePySimple}}
	case "crates":
		// The index file, when the registry serves it beside its
		// downloads (crates.io does not: its index is another host, whose
		// answers the gate remembers as the client fetches them).
		i := strings.Index(p, "/api/v1/crates/")
		if i < 0 {
			i = strings.LastIndex(p, "/crates/")
		}
		if i < 0 {
			return nil
		}
		f := sparseIndexPath(pkg.Name)
		return []metaFetch{{p[:i] + f, "*/*", gateCratesIndex}, {p[:i] + "/index" + f, "*/*", gateCratesIndex}}
	}
	return nil
}

// sparseIndexPath is a crate's index file under the index root.
func sparseIndexPath(name string) string {
	switch len(name) {
	case 1:
		return "/1/" + name
	case 2:
		return "/2/" + name
	case 3:
		return "/3/" + name[:1] + "/" + name
	}
	return "/" + name[:2] + "/" + name[2:4] + "/" + name
}

func parseVersions(kind gateKind, ctype string, body []byte) ([]pkgmeta.Version, error) {
	switch kind {
	case gateNPMMeta:
		return pkgmeta.NPMVersions(body)
	case gateCratesIndex:
		return pkgmeta.CratesIndexVersions(body)
	case gatePyJSON:
		return pkgmeta.PyPIJSONVersions(body)
	case gatePySimple:
		if !isSimpleJSON(ctype) {
			return nil, fmt.Errorf("simple page is %q, not JSON: it has no upload times", ctype)
		}
		return pkgmeta.SimpleJSONVersions(body)
	}
	return nil, fmt.Errorf("no metadata kind %d", kind)
}

func isSimpleJSON(ctype string) bool {
	return strings.HasPrefix(strings.TrimSpace(strings.ToLower(ctype)), "application/vnd.pypi.simple.v1+json")
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// gated is one version the gate judged on a metadata response.
func (gs *gateState) judge(pkg policies.Package, vi policies.VersionInfo, now time.Time) (policies.GateVerdict, bool) {
	if gv, denied := gs.lockVerdict(pkg); denied {
		return gv, true
	}
	if a, ok := gs.adv.Match(pkg); ok {
		return a.Verdict(gs.mode), true
	}
	if gs.g == nil || !ageGated(pkg.Ecosystem) {
		return policies.GateVerdict{Action: policies.ActionAllow}, false
	}
	gv := gs.g.Check(pkg, vi, now)
	// Held versions (install_scripts = "ask") stay listed: their
	// download waits for approval.
	return gv, gv.Action == policies.ActionDeny || gv.Action == policies.ActionAudit
}

// recordGated adds a judged version to the request's event.
func recordGated(pk *audit.Package, version string, vi policies.VersionInfo, gv policies.GateVerdict) {
	pk.GatedTotal++
	if len(pk.Gated) < audit.MaxGated {
		pk.Gated = append(pk.Gated, audit.GatedVersion{Version: version, Reason: gv.Reason, Rule: gv.Rule.Name, Published: fmtTime(vi.Published)})
	}
}

// lockVerdict denies a version the category's or the sandbox's
// lockfiles do not list (would_deny in an audit category).
func (gs *gateState) lockVerdict(pkg policies.Package) (policies.GateVerdict, bool) {
	if gv, denied := gs.lock.Check(pkg, gs.mode); denied {
		return gv, true
	}
	return gs.sbLock.Check(pkg, gs.mode)
}

// lockDigests are the digests the lockfiles give for pkg's version, one
// group per lockfile set that lists it: the artifact must match one
// digest of every group.
func (gs *gateState) lockDigests(pkg policies.Package) [][]string {
	var out [][]string
	for _, lk := range [2]*policies.LockSet{gs.lock, gs.sbLock} {
		if d := lk.Digests(pkg); len(d) > 0 {
			out = append(out, d)
		}
	}
	return out
}

var _ context.Context = (*exch)(nil)
