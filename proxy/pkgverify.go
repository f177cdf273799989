package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"

	"airlock/policies"
	"airlock/proxy/internal/pkgcache"
	"airlock/proxy/internal/pkgmeta"
)

// A download the package gate allowed is checked against the digest the
// registry's metadata gives for it (npm dist.integrity or shasum, PyPI
// sha256): the last byte is held back until the whole artifact hashed
// right, so a tampered artifact never reaches the sandbox whole.

// ruleIntegrity names a download cut because its bytes did not match.
const ruleIntegrity = "proxy.integrity"

// codeIntegrity starts the reason of a cut download.
const codeIntegrity = "integrity_mismatch"

var errIntegrity = errors.New("proxy: package integrity mismatch")

// expectIntegrity arms the check for the version's artifact: against
// the lockfiles' digests when they list it (one of each lockfile set's),
// else the one the registry's metadata names.
func (p *Proxy) expectIntegrity(x *exch, req *http.Request, ver pkgmeta.Version, locked [][]string) {
	if strings.HasSuffix(x.path, "/json") {
		return
	}
	groups := locked
	if len(groups) == 0 {
		sri := ver.Integrity
		if x.pkg.Ecosystem == "pypi" {
			sri = ver.Files[path.Base(x.path)]
		}
		if sri != "" {
			groups = [][]string{{sri}}
		}
	}
	spec := newVerifySpec(groups...)
	if spec == nil {
		return
	}
	x.evPkg.Integrity = spec.sri
	x.verify = spec
	req.Header.Set("Accept-Encoding", "identity") // the digest is of the bytes as published
	req.Header.Del("Range")                       // and of all of them
	req.Header.Del("If-Range")
}

// verifySpec is the digests an artifact may have: it must match one of
// each group (a group per source: a lockfile set, or the registry).
type verifySpec struct {
	hashes map[string]hash.Hash
	wants  []sriWant
	groups int
	sri    string // the digests, for the event
}

type sriWant struct {
	alg, sri string
	sum      []byte
	group    int
}

func newVerifySpec(groups ...[]string) *verifySpec {
	spec := &verifySpec{hashes: map[string]hash.Hash{}}
	var ok []string
	for _, sris := range groups {
		n := len(spec.wants)
		for _, sri := range sris {
			h, want, err := pkgmeta.ParseSRI(sri)
			if err != nil {
				continue
			}
			alg, _, _ := strings.Cut(sri, "-")
			if spec.hashes[alg] == nil {
				spec.hashes[alg] = h
			}
			spec.wants = append(spec.wants, sriWant{alg: alg, sri: sri, sum: want, group: spec.groups})
			ok = append(ok, sri)
		}
		if len(spec.wants) > n {
			spec.groups++
		}
	}
	if len(ok) == 0 {
		return nil
	}
	spec.sri = strings.Join(ok, " ")
	return spec
}

func (s *verifySpec) write(b []byte) {
	for _, h := range s.hashes {
		h.Write(b)
	}
}

// matches: the artifact matched one digest of every group.
func (s *verifySpec) matches() bool {
	sums := map[string][]byte{}
	for alg, h := range s.hashes {
		sums[alg] = h.Sum(nil)
	}
	matched := make([]bool, s.groups)
	for _, w := range s.wants {
		if bytes.Equal(sums[w.alg], w.sum) {
			matched[w.group] = true
		}
	}
	return !slices.Contains(matched, false)
}

// verifyResponse wraps a download's body in the check.
func (p *Proxy) verifyResponse(x *exch, resp *http.Response) *http.Response {
	if resp.StatusCode/100 == 2 && resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		v := internalDeny(ruleIntegrity, fmt.Sprintf("%s: the registry answered %d, not the whole artifact: its digest cannot be checked", codeIntegrity, resp.StatusCode))
		v.Category, v.Kind = x.v.Category, x.v.Kind
		return p.refuse(&x.ev, resp.Request, http.StatusBadGateway, v)
	}
	if resp.StatusCode != http.StatusOK || !hasBody(resp, resp.Request) && resp.Request != nil {
		return resp
	}
	if enc := strings.TrimSpace(resp.Header.Get("Content-Encoding")); enc != "" && !strings.EqualFold(enc, "identity") {
		resp.Body.Close()
		v := internalDeny(ruleIntegrity, codeIntegrity+": the registry sent the artifact with Content-Encoding "+enc+": its digest cannot be checked")
		v.Category, v.Kind = x.v.Category, x.v.Kind
		return p.refuse(&x.ev, resp.Request, http.StatusBadGateway, v)
	}
	resp.Body = &verifyBody{p: p, x: x, rc: resp.Body, spec: x.verify, sink: p.cacheWriter(x, resp)}
	return resp
}

// verifyBody passes the artifact on but its last byte, which it sends
// only once the whole artifact matched the digest.
type verifyBody struct {
	p       *Proxy
	x       *exch
	rc      io.ReadCloser
	spec    *verifySpec
	sink    *pkgcache.Writer // the cache entry the bytes go to, nil if none
	buf     []byte
	held    byte // the last byte read, not yet passed on
	hasHeld bool
	done    bool // upstream ended and the digest matched
	err     error
}

func (b *verifyBody) Read(p []byte) (int, error) {
	if b.err != nil || len(p) == 0 {
		return 0, b.err
	}
	if b.done {
		b.err = io.EOF
		if b.hasHeld {
			p[0], b.hasHeld = b.held, false
			return 1, nil
		}
		return 0, io.EOF
	}
	if cap(b.buf) < len(p)+1 {
		b.buf = make([]byte, len(p)+1)
	}
	buf, start := b.buf[:len(p)+1], 0
	if b.hasHeld {
		buf[0], start = b.held, 1
	}
	n, err := b.rc.Read(buf[start : start+len(p)])
	b.spec.write(buf[start : start+n])
	if b.sink != nil {
		b.sink.Write(buf[start : start+n])
	}
	total := start + n
	b.hasHeld = total > 0
	if b.hasHeld {
		total--
		b.held = buf[total]
	}
	switch {
	case err == io.EOF:
		ok := b.spec.matches()
		b.p.cacheStore(b.x, b.sink, ok)
		b.sink = nil
		if !ok {
			b.mismatch()
			return 0, b.err
		}
		b.done = true
	case err != nil:
		b.err = err
		return 0, err
	}
	return copy(p, buf[:total]), nil
}

// mismatch records the cut in the request's event: a denial naming the
// digest the metadata gave.
func (b *verifyBody) mismatch() {
	x := b.x
	v := x.v
	v.Action, v.WouldDeny = policies.ActionDeny, false
	v.Rule = policies.Rule{Name: ruleIntegrity}
	v.Reason = fmt.Sprintf("%s: %s@%s does not match the registry's %s; the download was cut before its last byte",
		codeIntegrity, x.pkg.Name, x.pkg.Version, b.spec.sri)
	x.ev.setVerdict(v)
	b.p.log.Warn("proxy: package integrity mismatch", "id", x.ev.e.ID, "sandbox", x.ev.e.Sandbox, "package", x.pkg.Name, "version", x.pkg.Version)
	b.err = errIntegrity
	x.ev.cut = true
}

func (b *verifyBody) Close() error {
	if b.sink != nil { // cut short: nothing is stored
		b.sink.Abort()
		b.sink = nil
	}
	return b.rc.Close()
}
