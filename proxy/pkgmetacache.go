package proxy

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"airlock/audit"
	"airlock/policies"
	"airlock/proxy/internal/pkgmeta"
)

// Metadata the gate rewrote is kept for a short TTL, per policy: the key
// holds the compiled category (a new one on every reload), its
// lockfiles and the denylist in force, so a cached document is only ever
// the one this policy would have produced now, give or take the TTL.

const (
	maxMetaEntries = 1024
	maxMetaBytes   = 256 << 20
)

type metaKey struct {
	cat               *policies.Category
	lock, sbLock      *policies.LockSet // the category's and the sandbox's lockfiles
	adv               *policies.Advisories
	scope, host, path string
	accept            string
}

type metaEntry struct {
	at      time.Time
	body    []byte
	ctype   string
	pkg     audit.Package // what the gate recorded: gated versions, warning
	reason  string
	verdict string
	would   bool
	vs      map[string]pkgmeta.Version
}

type metaCache struct {
	ttl   time.Duration
	mu    sync.Mutex
	m     map[metaKey]*metaEntry
	bytes int
}

func (c *metaCache) get(k metaKey) (*metaEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || time.Since(e.at) > c.ttl {
		return nil, false
	}
	return e, true
}

func (c *metaCache) put(k metaKey, e *metaEntry) {
	if c.ttl < 0 || len(e.body) > maxMetaBytes/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxMetaEntries || c.bytes+len(e.body) > maxMetaBytes {
		c.m, c.bytes = map[metaKey]*metaEntry{}, 0 // start over (and let old policies go)
	}
	if old, ok := c.m[k]; ok {
		c.bytes -= len(old.body)
	}
	c.m[k] = e
	c.bytes += len(e.body)
}

func (c *metaCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

func (c *metaCache) purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m, c.bytes = nil, 0
}

// metaKeyOf is the cache key of a metadata request, taken before the
// gate changes its headers.
func (x *exch) metaKeyOf(req *http.Request, gs *gateState) metaKey {
	k := metaKey{cat: x.v.Cat, lock: gs.lock, sbLock: gs.sbLock, adv: gs.adv, scope: x.cacheScopeOf(req), host: x.host + ":" + strconv.Itoa(int(x.port)), path: req.URL.RequestURI()}
	if gs.kind != gateNPMMeta { // npm's is always the full packument
		k.accept = req.Header.Get("Accept")
	}
	return k
}

// metaCached answers a metadata request from the cache, with the event
// the gate recorded when it rewrote the document.
func (p *Proxy) metaCached(x *exch, req *http.Request, gs *gateState) *http.Response {
	pc := p.cfg.PackageCache
	if pc == nil || pc.meta.ttl < 0 {
		return nil
	}
	gs.metaKey = x.metaKeyOf(req, gs)
	e, ok := pc.meta.get(gs.metaKey)
	if !ok {
		x.evPkg.Cache = cacheMiss
		return nil
	}
	p.times.putMap(gs.key, e.vs)
	x.evPkg.Gated, x.evPkg.GatedTotal, x.evPkg.Warning = slices.Clone(e.pkg.Gated), e.pkg.GatedTotal, e.pkg.Warning
	x.evPkg.Cache = cacheHit
	if e.reason != "" {
		x.ev.e.Reason = e.reason
	}
	if e.would {
		x.ev.e.Verdict, x.ev.e.WouldDeny = e.verdict, true
	}
	hdr := http.Header{}
	hdr.Set("Content-Type", e.ctype)
	hdr.Set("Content-Length", strconv.Itoa(len(e.body)))
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: hdr, Body: io.NopCloser(bytes.NewReader(e.body)), ContentLength: int64(len(e.body)), Request: req}
}

// metaStore keeps a document the gate rewrote.
func (p *Proxy) metaStore(x *exch, gs *gateState, body []byte, ctype string, vs map[string]pkgmeta.Version) {
	pc := p.cfg.PackageCache
	if pc == nil || x.evPkg.Cache != cacheMiss {
		return
	}
	pk := x.evPkg
	pk.Gated = slices.Clone(pk.Gated)
	pc.meta.put(gs.metaKey, &metaEntry{at: time.Now(), body: body, ctype: ctype, pkg: pk, reason: x.ev.e.Reason,
		verdict: x.ev.e.Verdict, would: x.ev.e.WouldDeny, vs: vs})
}
