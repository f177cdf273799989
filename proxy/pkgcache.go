package proxy

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"airlock/proxy/internal/pkgcache"
)

// The shared verified cache: an artifact the package gate allowed and
// whose bytes matched the registry's digest is stored by that digest,
// and served from the cache to a later download of the same digest, once
// the requesting sandbox's policy and the gate allowed that download.
// Artifacts of a private category (one that injects a credential, or a
// request that carries one) are stored in the scope of the category and
// the sandbox's tenant, and served only there. Metadata the gate
// rewrote is kept per policy for a short TTL (pkgmeta_cache.go).

// CacheEntry describes one cached artifact.
type CacheEntry = pkgcache.Meta

// CacheStats counts what the cache holds and did.
type CacheStats = pkgcache.Stats

// PackageCache is the shared cache of verified package artifacts and of
// rewritten metadata. It is safe for concurrent use.
type PackageCache struct {
	c    *pkgcache.Cache
	meta metaCache
	debs debDigests // what Debian Packages indices said of .debs
	// debParses bounds the Packages indices parsed at once (each may hold
	// up to maxDebDigestBytes of names and a 64 MiB xz dictionary).
	debParses chan struct{}
}

// DefaultMetadataTTL is how long rewritten metadata is reused when the
// configuration does not say.
const DefaultMetadataTTL = time.Minute

// OpenPackageCache opens (or creates) the cache in dir, bounded to
// maxBytes of artifacts; metadata is reused for metaTTL (0: the default,
// negative: never). Index lines and entries that do not check are
// dropped.
func OpenPackageCache(dir string, maxBytes int64, metaTTL time.Duration) (*PackageCache, error) {
	c, err := pkgcache.Open(dir, maxBytes)
	if err != nil {
		return nil, err
	}
	if metaTTL == 0 {
		metaTTL = DefaultMetadataTTL
	}
	return &PackageCache{c: c, meta: metaCache{ttl: metaTTL}, debParses: make(chan struct{}, maxDebParses)}, nil
}

// Close closes the cache's index.
func (pc *PackageCache) Close() error { return pc.c.Close() }

// List returns the cached artifacts, most recently used first.
func (pc *PackageCache) List() []CacheEntry { return pc.c.List() }

// Stats returns the cache's counts.
func (pc *PackageCache) Stats() CacheStats {
	s := pc.c.Stats()
	s.MetaEntries = pc.meta.len()
	return s
}

// Purge removes the artifacts match selects (nil: all) and all cached
// metadata; it returns how many artifacts and their bytes.
func (pc *PackageCache) Purge(match func(CacheEntry) bool) (int, int64, error) {
	pc.meta.purge()
	return pc.c.Purge(match)
}

// Cache values of audit.Package.Cache.
const (
	cacheHit  = "hit"
	cacheMiss = "miss"
)

// cacheScope is "" for an artifact every sandbox may share, else the
// category and tenant it stays in.
func (x *exch) cacheScopeOf(req *http.Request) string {
	cat := x.v.Cat
	if cat.Inject == nil && req.Header.Get("Authorization") == "" {
		return ""
	}
	tenant := x.sc.f.sb.Tenant
	if tenant == "" {
		tenant = "sandbox:" + x.sc.f.sb.ID
	}
	return cat.Name + "|" + tenant
}

// cacheLookup answers a download the gate allowed from the cache, when an
// entry of one of its digests is there and still hashes right; the
// integrity check then runs again on the bytes served.
func (p *Proxy) cacheLookup(x *exch, req *http.Request) *http.Response {
	pc := p.cfg.PackageCache
	if pc == nil || x.verify == nil {
		return nil
	}
	x.cacheScope = x.cacheScopeOf(req)
	h, ok := pc.c.Get(x.cacheScope, x.verify.sris())
	if !ok {
		x.evPkg.Cache = cacheMiss
		return nil
	}
	x.evPkg.Cache = cacheHit
	x.ev.e.Reason = "served from the package cache"
	hdr := http.Header{}
	if h.ContentType != "" {
		hdr.Set("Content-Type", h.ContentType)
	}
	hdr.Set("Content-Length", strconv.FormatInt(h.Size, 10))
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: hdr, Body: h.File, ContentLength: h.Size, Request: req}
}

// cacheWriter is where a missed download's bytes go on their way to the
// sandbox; nil when the cache is off or cannot take it.
func (p *Proxy) cacheWriter(x *exch, resp *http.Response) *pkgcache.Writer {
	pc := p.cfg.PackageCache
	if pc == nil || x.evPkg.Cache != cacheMiss {
		return nil
	}
	w, err := pc.c.Create(pkgcache.Meta{Scope: x.cacheScope, SRI: x.verify.first(), Ecosystem: x.pkg.Ecosystem,
		Name: x.pkg.Name, Version: x.pkg.Version, ContentType: resp.Header.Get("Content-Type")})
	if err != nil {
		p.log.Warn("proxy: package cache", "id", x.ev.e.ID, "err", err)
		return nil
	}
	return w
}

// cacheStore ends a missed download's entry: stored when the artifact
// matched its digest, else thrown away. (The entry checks the bytes
// against the first digest again before it stores them.)
func (p *Proxy) cacheStore(x *exch, w *pkgcache.Writer, matched bool) {
	if w == nil {
		return
	}
	if !matched {
		w.Abort()
		return
	}
	if err := w.Commit(); err != nil {
		p.log.Warn("proxy: package cache", "id", x.ev.e.ID, "package", x.pkg.Name, "version", x.pkg.Version, "err", err)
	}
}

var _ io.Writer = (*pkgcache.Writer)(nil)

func (s *verifySpec) sris() []string {
	out := make([]string, len(s.wants))
	for i, w := range s.wants {
		out[i] = w.sri
	}
	return out
}

func (s *verifySpec) first() string { return s.wants[0].sri }
