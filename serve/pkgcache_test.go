package serve

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"airlock/client"
	"airlock/proxy"
)

// cacheFake is the fake backend with the appliance's cache routes.
type cacheFake struct {
	*fakeBackend
	a *Appliance
}

func (f cacheFake) CacheStats(ctx context.Context) (client.CacheStats, error) {
	return f.a.CacheStats(ctx)
}
func (f cacheFake) CacheEntries(ctx context.Context, n string) ([]client.CacheEntry, error) {
	return f.a.CacheEntries(ctx, n)
}
func (f cacheFake) PurgeCache(ctx context.Context, r client.CachePurgeRequest) (client.CachePurgeResult, error) {
	return f.a.PurgeCache(ctx, r)
}

// TestAPICache: the cache routes over the socket, with the cache on and
// off.
func TestAPICache(t *testing.T) {
	ctx := context.Background()
	off, _ := startAPI(t, cacheFake{newFake(), &Appliance{}}, "")
	if s, err := off.CacheStats(ctx); err != nil || s.Enabled {
		t.Fatalf("stats of no cache: %+v %v", s, err)
	}
	var ce *client.Error
	if _, err := off.CacheEntries(ctx, ""); !errors.As(err, &ce) || ce.Code != client.CodeUnsupported {
		t.Fatalf("entries of no cache: %v", err)
	}
	pc, err := proxy.OpenPackageCache(t.TempDir(), 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	on, _ := startAPI(t, cacheFake{newFake(), &Appliance{pcache: pc}}, "")
	s, err := on.CacheStats(ctx)
	if err != nil || !s.Enabled || s.MaxBytes != 1<<20 {
		t.Fatalf("stats: %+v %v", s, err)
	}
	if es, err := on.CacheEntries(ctx, "left-pad"); err != nil || len(es) != 0 {
		t.Fatalf("entries: %+v %v", es, err)
	}
	if r, err := on.PurgeCache(ctx, client.CachePurgeRequest{Name: "left-pad"}); err != nil || r.Entries != 0 {
		t.Fatalf("purge: %+v %v", r, err)
	}
}

func TestPackageCacheConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		c    PackageCacheConfig
		want string
	}{
		"relative dir": {PackageCacheConfig{Dir: "cache", MaxMB: 10}, "packages.cache.dir"},
		"negative":     {PackageCacheConfig{MaxMB: -1}, "packages.cache.max_mb"},
		"long ttl":     {PackageCacheConfig{MaxMB: 1, MetadataTTL: Duration{2 * maxMetadataTTL}}, "packages.cache.metadata_ttl"},
		"ok":           {PackageCacheConfig{Dir: "/var/lib/airlock/pkgcache", MaxMB: 1024, MetadataTTL: Duration{maxMetadataTTL}}, ""},
	} {
		var got []string
		tc.c.validate(func(key, _ string, _ ...any) { got = append(got, key) })
		if (tc.want == "") != (len(got) == 0) || tc.want != "" && got[0] != tc.want {
			t.Errorf("%s: errors at %v, want %q", name, got, tc.want)
		}
	}
}

// TestRegistryTenants: the proxy learns each sandbox's owner, the scope
// of its private registries' cached artifacts.
func TestRegistryTenants(t *testing.T) {
	r := NewRegistry()
	a := netip.MustParseAddr("198.18.0.10")
	r.Add("sb-1", a, nil)
	if sb, ok := r.ProxyIdentifier().Identify(a); !ok || sb.Tenant != "" {
		t.Fatalf("without tenants: %+v %v", sb, ok)
	}
	r.SetTenants(func(id string) string { return map[string]string{"sb-1": "alice"}[id] })
	if sb, _ := r.ProxyIdentifier().Identify(a); sb.Tenant != "alice" {
		t.Fatalf("tenant %q, want alice", sb.Tenant)
	}
}
