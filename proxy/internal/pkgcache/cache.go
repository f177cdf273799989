// Package pkgcache is the appliance's shared cache of verified package
// artifacts: files stored by the digest the registry gave for them (in
// Subresource Integrity form), bounded by size with LRU eviction, with
// an index on disk that survives restarts. Every entry is hashed again
// before it is served; one whose bytes no longer match is dropped.
package pkgcache

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Meta describes one cached artifact.
type Meta struct {
	Key         string    `json:"key"`
	Scope       string    `json:"scope,omitempty"` // "" shared; else the category and tenant it belongs to
	SRI         string    `json:"sri"`             // the digest its bytes have
	Ecosystem   string    `json:"ecosystem"`
	Name        string    `json:"name"`
	Version     string    `json:"version,omitempty"`
	ContentType string    `json:"content_type,omitempty"`
	Size        int64     `json:"size"`
	Stored      time.Time `json:"stored"`
	Used        time.Time `json:"used"`
	Hits        int64     `json:"hits"`
}

// Stats counts what the cache holds and did since it opened.
type Stats struct {
	Entries   int   `json:"entries"`
	Bytes     int64 `json:"bytes"`
	MaxBytes  int64 `json:"max_bytes"`
	Hits      int64 `json:"hits"`
	Misses    int64 `json:"misses"`
	Stores    int64 `json:"stores"`
	Evictions int64 `json:"evictions"`
	Corrupt   int64 `json:"corrupt"` // entries (or index lines) dropped because their digest did not match
	// MetaEntries is the metadata documents cached (filled by the proxy).
	MetaEntries int `json:"meta_entries"`
}

// Cache is safe for concurrent use.
type Cache struct {
	dir string
	max int64

	mu    sync.Mutex
	m     map[string]*list.Element // key -> *Meta
	lru   *list.List               // front: most recently used
	size  int64
	st    Stats
	jf    *os.File // the index journal, appended to
	lines int      // lines in the journal
}

// Key is the name of the entry for an artifact of digest sri in scope.
func Key(scope, sri string) string {
	h := sha256.Sum256([]byte(scope + "\x00" + sri))
	return hex.EncodeToString(h[:])
}

// Open opens (or creates) the cache in dir, bounded to max bytes. Index
// lines and entries that do not check are dropped and counted in Corrupt.
func Open(dir string, max int64) (*Cache, error) {
	if max <= 0 {
		return nil, fmt.Errorf("package cache: max size %d is not positive", max)
	}
	for _, d := range []string{dir, filepath.Join(dir, "blobs"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("package cache: %w", err)
		}
	}
	c := &Cache{dir: dir, max: max, m: map[string]*list.Element{}, lru: list.New()}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cache) blob(key string) string { return filepath.Join(c.dir, "blobs", key[:2], key) }

// Close closes the index journal; the cache is not usable after it.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jf == nil {
		return nil
	}
	err := c.jf.Close()
	c.jf = nil
	return err
}

// Stats returns the current counts.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st
	s.Entries, s.Bytes, s.MaxBytes = c.lru.Len(), c.size, c.max
	return s
}

// List returns the entries, most recently used first.
func (c *Cache) List() []Meta {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Meta, 0, c.lru.Len())
	for e := c.lru.Front(); e != nil; e = e.Next() {
		out = append(out, *e.Value.(*Meta))
	}
	return out
}

// Purge removes the entries match selects (nil: all) and returns how
// many and their bytes.
func (c *Cache) Purge(match func(Meta) bool) (int, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, bytes := 0, int64(0)
	var errs []error
	for e := c.lru.Front(); e != nil; {
		next := e.Next()
		m := e.Value.(*Meta)
		if match == nil || match(*m) {
			n, bytes = n+1, bytes+m.Size
			errs = append(errs, c.dropLocked(e))
		}
		e = next
	}
	return n, bytes, errors.Join(errs...)
}

// dropLocked removes an entry from the index, the journal and the disk.
func (c *Cache) dropLocked(e *list.Element) error {
	m := e.Value.(*Meta)
	c.lru.Remove(e)
	delete(c.m, m.Key)
	c.size -= m.Size
	err := os.Remove(c.blob(m.Key))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return errors.Join(err, c.appendLocked(record{Op: opDel, Key: m.Key}))
}

// evictLocked makes room for n more bytes, oldest first.
func (c *Cache) evictLocked(n int64) error {
	var errs []error
	for c.size+n > c.max && c.lru.Len() > 0 {
		errs = append(errs, c.dropLocked(c.lru.Back()))
		c.st.Evictions++
	}
	return errors.Join(errs...)
}
