package proxy

import (
	"sync"
	"time"

	"airlock/policies"
	"airlock/proxy/internal/pkgmeta"
)

// versionTTL is how long what metadata said of a package's versions is
// reused to check its downloads.
const versionTTL = 5 * time.Minute

// maxVersionEntries bounds the packages remembered; when full, the
// cache starts over.
const maxVersionEntries = 4096

// versionCache remembers the versions of packages whose metadata the
// gate read, by category, ecosystem and name: a download that follows
// its metadata (the usual install) needs no second fetch.
type versionCache struct {
	mu sync.Mutex
	m  map[string]versionEntry
}

type versionEntry struct {
	at time.Time
	vs map[string]pkgmeta.Version
}

func (c *versionCache) get(key string) (map[string]pkgmeta.Version, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || time.Since(e.at) > versionTTL {
		return nil, false
	}
	return e.vs, true
}

func (c *versionCache) put(key string, vs []pkgmeta.Version) map[string]pkgmeta.Version {
	m := make(map[string]pkgmeta.Version, len(vs))
	for _, v := range vs {
		m[v.Version] = v
	}
	c.putMap(key, m)
	return m
}

// putMap remembers versions already keyed (from the metadata cache).
func (c *versionCache) putMap(key string, m map[string]pkgmeta.Version) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxVersionEntries {
		c.m = map[string]versionEntry{}
	}
	c.m[key] = versionEntry{at: time.Now(), vs: m}
}

// info is what the gate decides a version on.
func info(v pkgmeta.Version) policies.VersionInfo {
	return policies.VersionInfo{Published: v.Published, InstallScript: v.InstallScript}
}
