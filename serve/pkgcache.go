package serve

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"airlock/client"
	"airlock/proxy"
)

// PackageCacheConfig is [packages.cache]: the shared verified cache of
// package artifacts, on when max_mb is set.
type PackageCacheConfig struct {
	Dir         string   `toml:"dir"`          // default STATE_DIR/pkgcache
	MaxMB       int64    `toml:"max_mb"`       // artifacts' bound; 0: no cache
	MetadataTTL Duration `toml:"metadata_ttl"` // rewritten metadata reused this long (default 1m)
}

// maxMetadataTTL bounds metadata_ttl: the release-age gate's answer
// changes with time.
const maxMetadataTTL = time.Hour

func (c PackageCacheConfig) validate(add func(key, format string, args ...any)) {
	if c.Dir != "" && !filepath.IsAbs(c.Dir) {
		add("packages.cache.dir", "must be an absolute path, not %q", c.Dir)
	}
	if c.MaxMB < 0 || c.MaxMB > 1<<30 {
		add("packages.cache.max_mb", "must be between 0 (no cache) and %d, not %d", 1<<30, c.MaxMB)
	}
	if c.MetadataTTL.Duration > maxMetadataTTL {
		add("packages.cache.metadata_ttl", "must be at most %s, not %s", maxMetadataTTL, c.MetadataTTL.Duration)
	}
}

// openPackageCache opens the cache the config asks for (nil when none).
func (a *Appliance) openPackageCache() (*proxy.PackageCache, error) {
	c := a.cfg.Packages.Cache
	if c.MaxMB == 0 {
		return nil, nil
	}
	dir := c.Dir
	if dir == "" {
		dir = filepath.Join(a.cfg.StateDir, "pkgcache")
	}
	pc, err := proxy.OpenPackageCache(dir, c.MaxMB<<20, c.MetadataTTL.Duration)
	if err != nil {
		return nil, fmt.Errorf("packages.cache: %w", err)
	}
	st := pc.Stats()
	a.log.Info("package cache opened", "dir", dir, "entries", st.Entries, "bytes", st.Bytes, "dropped", st.Corrupt)
	return pc, nil
}

// CacheBackend is the package cache (`airlock cache`). A Backend without
// it answers the cache routes with "unsupported".
type CacheBackend interface {
	CacheStats(ctx context.Context) (client.CacheStats, error)
	CacheEntries(ctx context.Context, name string) ([]client.CacheEntry, error)
	PurgeCache(ctx context.Context, req client.CachePurgeRequest) (client.CachePurgeResult, error)
}

func (a *API) cacheRoutes(mux *http.ServeMux, v string) {
	mux.HandleFunc("GET "+v+"/cache", a.cacheStats)
	mux.HandleFunc("GET "+v+"/cache/entries", a.cacheEntries)
	mux.HandleFunc("POST "+v+"/cache/purge", a.cachePurge)
}

func (a *API) cacheBackend(w http.ResponseWriter, r *http.Request) (CacheBackend, bool) {
	cb, ok := backendAs[CacheBackend](a, w, r, "has no package cache")
	return cb, ok
}

func (a *API) cacheStats(w http.ResponseWriter, r *http.Request) {
	if cb, ok := a.cacheBackend(w, r); ok {
		s, err := cb.CacheStats(r.Context())
		a.reply(w, r, s, err)
	}
}

func (a *API) cacheEntries(w http.ResponseWriter, r *http.Request) {
	if cb, ok := a.cacheBackend(w, r); ok {
		es, err := cb.CacheEntries(r.Context(), r.URL.Query().Get("name"))
		replyList(a, w, r, es, err)
	}
}

func (a *API) cachePurge(w http.ResponseWriter, r *http.Request) {
	cb, ok := a.cacheBackend(w, r)
	if !ok {
		return
	}
	var req client.CachePurgeRequest
	if !a.decode(w, r, &req) {
		return
	}
	res, err := cb.PurgeCache(r.Context(), req)
	if err == nil {
		a.log().Info("package cache purged", "by", Peer(r.Context()), "ecosystem", req.Ecosystem, "name", req.Name, "entries", res.Entries, "bytes", res.Bytes)
	}
	a.reply(w, r, res, err)
}

var _ CacheBackend = (*Appliance)(nil)

// CacheStats reports the package cache (Enabled false when it is off).
func (a *Appliance) CacheStats(context.Context) (client.CacheStats, error) {
	if a.pcache == nil {
		return client.CacheStats{}, nil
	}
	s := a.pcache.Stats()
	return client.CacheStats{Enabled: true, Entries: s.Entries, Bytes: s.Bytes, MaxBytes: s.MaxBytes, Hits: s.Hits, Misses: s.Misses,
		Stores: s.Stores, Evictions: s.Evictions, Corrupt: s.Corrupt, MetaEntries: s.MetaEntries}, nil
}

// CacheEntries lists the cached artifacts, of one name when name is set.
func (a *Appliance) CacheEntries(_ context.Context, name string) ([]client.CacheEntry, error) {
	if a.pcache == nil {
		return nil, client.Errorf(client.CodeUnsupported, "the package cache is off ([packages.cache] max_mb)")
	}
	var out []client.CacheEntry
	for _, m := range a.pcache.List() {
		if name == "" || m.Name == name {
			out = append(out, client.CacheEntry{Key: m.Key, Scope: m.Scope, Integrity: m.SRI, Ecosystem: m.Ecosystem, Name: m.Name,
				Version: m.Version, Size: m.Size, Stored: m.Stored, Used: m.Used, Hits: m.Hits})
		}
	}
	return out, nil
}

// PurgeCache removes the selected artifacts and all cached metadata.
func (a *Appliance) PurgeCache(_ context.Context, req client.CachePurgeRequest) (client.CachePurgeResult, error) {
	if a.pcache == nil {
		return client.CachePurgeResult{}, client.Errorf(client.CodeUnsupported, "the package cache is off ([packages.cache] max_mb)")
	}
	n, b, err := a.pcache.Purge(func(m proxy.CacheEntry) bool {
		return (req.Ecosystem == "" || m.Ecosystem == req.Ecosystem) && (req.Name == "" || m.Name == req.Name)
	})
	return client.CachePurgeResult{Entries: n, Bytes: b}, err
}
