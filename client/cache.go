package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// CacheEntry is one artifact in the appliance's package cache.
type CacheEntry struct {
	Key       string    `json:"key"`
	Scope     string    `json:"scope,omitempty"` // "" shared; else "CATEGORY|TENANT"
	Integrity string    `json:"integrity"`
	Ecosystem string    `json:"ecosystem"`
	Name      string    `json:"name"`
	Version   string    `json:"version,omitempty"`
	Size      int64     `json:"size"`
	Stored    time.Time `json:"stored"`
	Used      time.Time `json:"used"`
	Hits      int64     `json:"hits"`
}

// CacheStats is GET /v1/cache: what the package cache holds and did
// since the appliance started.
type CacheStats struct {
	Enabled     bool  `json:"enabled"`
	Entries     int   `json:"entries"`
	Bytes       int64 `json:"bytes"`
	MaxBytes    int64 `json:"max_bytes"`
	Hits        int64 `json:"hits"`
	Misses      int64 `json:"misses"`
	Stores      int64 `json:"stores"`
	Evictions   int64 `json:"evictions"`
	Corrupt     int64 `json:"corrupt"`
	MetaEntries int   `json:"meta_entries"`
}

// CachePurgeRequest selects the artifacts to remove (empty: all); the
// cached metadata is always dropped.
type CachePurgeRequest struct {
	Ecosystem string `json:"ecosystem,omitempty"`
	Name      string `json:"name,omitempty"`
}

// CachePurgeResult is what a purge removed.
type CachePurgeResult struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// CacheStats returns the package cache's counts.
func (c *Client) CacheStats(ctx context.Context) (CacheStats, error) {
	var s CacheStats
	return s, c.call(ctx, http.MethodGet, "/cache", nil, &s)
}

// CacheEntries lists the cached artifacts (of one package name when
// name is set), most recently used first.
func (c *Client) CacheEntries(ctx context.Context, name string) ([]CacheEntry, error) {
	var es []CacheEntry
	p := "/cache/entries"
	if name != "" {
		p += "?name=" + url.QueryEscape(name)
	}
	return es, c.call(ctx, http.MethodGet, p, nil, &es)
}

// PurgeCache removes cached artifacts.
func (c *Client) PurgeCache(ctx context.Context, req CachePurgeRequest) (CachePurgeResult, error) {
	var r CachePurgeResult
	return r, c.call(ctx, http.MethodPost, "/cache/purge", req, &r)
}
