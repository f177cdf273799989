package proxy

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"airlock/policies"
	"airlock/proxy/internal/pkgmeta"
)

// maxPackageMeta bounds a metadata document the gate reads (the largest
// npm packuments are tens of megabytes); a larger one is refused.
const maxPackageMeta = 64 << 20

var errMetaTooLarge = errors.New("package metadata over 64 MiB")

// gateResponse rewrites a metadata response so that the versions the
// gate denies are gone; metadata it cannot read is refused (502): the
// gate fails closed.
func (p *Proxy) gateResponse(x *exch, resp *http.Response, req *http.Request) *http.Response {
	gs := x.gate
	if gs.kind == gateDebIndex {
		return p.debIndexResponse(x, resp)
	}
	if resp.StatusCode != http.StatusOK {
		return resp
	}
	body, err := readMeta(resp)
	if err != nil {
		return p.metaRefusal(x, req, err)
	}
	ctype := resp.Header.Get("Content-Type")
	vs, err := p.metaVersions(x, req, gs, ctype, body)
	if err != nil && gs.cacheOnly {
		// No rule needs it read: the document passes as it came, uncached.
		p.log.Debug("proxy: package cache: metadata not cached", "id", x.ev.e.ID, "err", err)
		resp.Header.Del("Content-Encoding")
		return withBody(resp, body)
	}
	if err != nil {
		return p.metaRefusal(x, req, err)
	}
	vm := p.times.put(gs.key, vs)
	hidden := p.judgeAll(x, gs, vm)
	sdists := gs.kind != gateNPMMeta && gs.g.DeniesSdists(x.pkg)
	if len(hidden) > 0 || sdists {
		seen := map[string]bool{}
		hideFile := func(f string) bool {
			if hidden[pkgmeta.FileVersion(f)] {
				return true
			}
			if sdists && policies.IsSdist(f) {
				if seen[f] {
					return true
				}
				seen[f] = true
				recordGated(&x.evPkg, pkgmeta.FileVersion(f), policies.VersionInfo{}, policies.GateVerdict{Rule: gs.g.SdistsRule(),
					Reason: policies.CodeSdist + ": " + f + " is a source distribution (sdists = \"deny\")"})
				return true
			}
			return false
		}
		if body, err = rewriteMeta(gs.kind, ctype, body, hidden, hideFile); err != nil {
			return p.metaRefusal(x, req, err)
		}
		resp.Header.Del("ETag")
		resp.Header.Del("Last-Modified")
	}
	p.metaStore(x, gs, body, ctype, vm)
	resp.Header.Del("Content-Encoding")
	return withBody(resp, body)
}

func withBody(resp *http.Response, body []byte) *http.Response {
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.ContentLength = int64(len(body))
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp
}

// metaVersions are the versions of a metadata document with their
// publish times; an HTML simple page has none, so they come from the
// same page in JSON or from PyPI's JSON API.
func (p *Proxy) metaVersions(x *exch, req *http.Request, gs *gateState, ctype string, body []byte) ([]pkgmeta.Version, error) {
	if gs.kind != gatePySimple || isSimpleJSON(ctype) {
		return parseVersions(gs.kind, ctype, body)
	}
	path := x.path
	pre := path[:strings.Index(path, "/simple/")]
	var errs []error
	for _, f := range []metaFetch{{path, acceptSimpleJSON, gatePySimple}, {pre + "/pypi/" + x.pkg.Name + "/json", "application/json", gatePyJSON}} {
		b, ct, err := p.sideFetch(x, req, f.path, f.accept)
		if err == nil {
			var vs []pkgmeta.Version
			if vs, err = parseVersions(f.kind, ct, b); err == nil {
				return withHTMLFiles(vs, body), nil
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", f.path, err))
	}
	// No publish times anywhere: every version listed is judged without
	// one (unknown_release_age decides).
	if gs.g == nil || gs.g.MinAge == 0 {
		return withHTMLFiles(nil, body), nil
	}
	p.log.Warn("proxy: package gate: no upload times for a simple page", "id", x.ev.e.ID, "err", errors.Join(errs...))
	return withHTMLFiles(nil, body), nil
}

// withHTMLFiles adds the versions of the page's links that vs lacks,
// without a publish time.
func withHTMLFiles(vs []pkgmeta.Version, page []byte) []pkgmeta.Version {
	seen := map[string]bool{}
	for _, v := range vs {
		seen[v.Version] = true
	}
	for _, v := range pkgmeta.SimpleHTMLVersions(page) {
		if !seen[v] {
			seen[v] = true
			vs = append(vs, pkgmeta.Version{Version: v})
		}
	}
	at := make(map[string]int, len(vs))
	for i := range vs {
		at[vs[i].Version] = i
	}
	for f, sri := range pkgmeta.SimpleHTMLFiles(page) {
		i, ok := at[pkgmeta.FileVersion(f)]
		if !ok {
			continue
		}
		if vs[i].Files == nil {
			vs[i].Files = map[string]string{}
		}
		if _, known := vs[i].Files[f]; !known {
			vs[i].Files[f] = sri
		}
	}
	return vs
}

// judgeAll decides every version, records the gated ones in the event
// and returns the ones to hide.
func (p *Proxy) judgeAll(x *exch, gs *gateState, vs map[string]pkgmeta.Version) map[string]bool {
	hidden, now := map[string]bool{}, time.Now()
	would, warned := 0, 0
	for v, ver := range vs {
		vi := info(ver)
		pkg := x.pkg
		pkg.Version = v
		gv, gated := gs.judge(pkg, vi, now)
		if gv.Warning != "" {
			warned++
		}
		if !gated {
			continue
		}
		recordGated(&x.evPkg, v, vi, gv)
		if gv.WouldDeny {
			would++
		} else {
			hidden[v] = true
		}
	}
	switch {
	case would > 0:
		x.ev.e.Verdict, x.ev.e.WouldDeny = policies.ActionAudit.String(), true
		x.ev.e.Reason = fmt.Sprintf("the package gate would hide %d of %d versions (audit mode)", would, len(vs))
	case len(hidden) > 0:
		x.ev.e.Reason = fmt.Sprintf("the package gate hid %d of %d versions", len(hidden), len(vs))
	}
	if warned > 0 {
		x.evPkg.Warning = fmt.Sprintf("%s: %d versions have no publish time (allowed: unknown_release_age = \"allow\")", policies.CodeNoPublishTime, warned)
	}
	return hidden
}

func rewriteMeta(kind gateKind, ctype string, body []byte, hidden map[string]bool, hideFile func(string) bool) ([]byte, error) {
	switch {
	case kind == gateNPMMeta:
		return pkgmeta.RewriteNPM(body, hidden)
	case kind == gateCratesIndex:
		return pkgmeta.RewriteCratesIndex(body, hidden)
	case kind == gatePyJSON:
		return pkgmeta.RewritePyPIJSONFiles(body, hidden, hideFile)
	case isSimpleJSON(ctype):
		return pkgmeta.RewriteSimpleJSONFiles(body, hidden, hideFile)
	}
	return pkgmeta.RewriteSimpleHTMLFiles(body, hideFile)
}

func (p *Proxy) metaRefusal(x *exch, req *http.Request, err error) *http.Response {
	var re *readError
	if errors.As(err, &re) {
		p.log.Warn("proxy: package gate: metadata read", "id", x.ev.e.ID, "err", re.err)
	}
	v := internalDeny(rulePackageMeta, "the package gate cannot read the registry's metadata: "+err.Error())
	v.Category, v.Kind = x.v.Category, x.v.Kind
	return p.refuse(&x.ev, req, http.StatusBadGateway, v)
}

// readError is a metadata body that could not be read. Its text reaches
// the sandbox (refusal body and status line), so it names nothing the
// transport saw (addresses); metaRefusal logs the error itself. A gzip
// stream that is not valid keeps its own text.
type readError struct{ err error }

func (e *readError) Error() string { return "the registry's response could not be read" }
func (e *readError) Unwrap() error { return e.err }

func bodyErr(err error) error {
	var corrupt flate.CorruptInputError
	if errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.As(err, &corrupt) {
		return err
	}
	return &readError{err: err}
}

// readMeta reads a metadata body, at most maxPackageMeta bytes, undoing
// gzip (sent although the gate asked for identity).
func readMeta(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	var r io.Reader = resp.Body
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, bodyErr(fmt.Errorf("gzip: %w", err))
		}
		r = gz
	default:
		return nil, fmt.Errorf("unsupported content encoding %q", enc)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxPackageMeta+1))
	if err != nil {
		return nil, bodyErr(err)
	}
	if len(b) > maxPackageMeta {
		return nil, errMetaTooLarge
	}
	return b, nil
}

// sideFetch gets a metadata document from the request's registry, over
// the sandbox's upstream to the addresses checked for the request, with
// the request's credentials.
func (p *Proxy) sideFetch(x *exch, req *http.Request, path, accept string) ([]byte, string, error) {
	// The sandbox's policy decides this request as if the sandbox sent
	// it: the gate never reaches a path the sandbox could not.
	v := x.sc.f.sb.Policy.Decide(policies.Request{Stage: policies.StageHTTP, Host: x.host, Port: x.port, Method: http.MethodGet,
		Scheme: x.sc.scheme, Path: path, Accept: accept})
	if !v.Action.Allows() {
		return nil, "", fmt.Errorf("the policy denies it (%s: %s)", v.Rule.Name, v.Reason)
	}
	u, err := url.Parse(req.URL.Scheme + "://" + req.URL.Host + path)
	if err != nil {
		return nil, "", err
	}
	sreq, err := http.NewRequestWithContext(x, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", err
	}
	sreq.Host = req.Host
	sreq.Header.Set("Accept", accept)
	sreq.Header.Set("Accept-Encoding", "identity")
	for _, k := range []string{"Authorization", "User-Agent"} {
		if v := req.Header.Get(k); v != "" {
			sreq.Header.Set(k, v)
		}
	}
	resp, err := x.sc.tr.roundTrip(sreq, x.dt.addrs, x.sc.f)
	if err != nil {
		// The reason reaches the sandbox (body and status line): the
		// transport's error, which names addresses, goes to the log only.
		p.log.Warn("proxy: package gate: metadata fetch", "id", x.ev.e.ID, "path", path, "err", err)
		return nil, "", errors.New("the registry could not be reached")
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, "", fmt.Errorf("status %d", resp.StatusCode)
	}
	b, err := readMeta(resp)
	return b, resp.Header.Get("Content-Type"), err
}
