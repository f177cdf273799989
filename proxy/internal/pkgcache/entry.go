package pkgcache

import (
	"bytes"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"airlock/proxy/internal/pkgmeta"
)

// Hit is a cached artifact opened for serving: its bytes were hashed
// and matched the entry's digest just now.
type Hit struct {
	Meta
	File *os.File // at offset 0; the caller closes it
}

// Get returns the entry of one of the digests in scope, checked. An
// entry whose bytes do not match its digest is dropped (Corrupt), and
// Get goes on as for a miss.
func (c *Cache) Get(scope string, sris []string) (*Hit, bool) {
	for _, sri := range sris {
		if h, ok := c.get(Key(scope, sri)); ok {
			return h, true
		}
	}
	c.mu.Lock()
	c.st.Misses++
	c.mu.Unlock()
	return nil, false
}

func (c *Cache) get(key string) (*Hit, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	var m Meta
	if ok {
		m = *e.Value.(*Meta)
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	f, err := c.check(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok = c.m[key]
	if err != nil {
		if ok {
			c.st.Corrupt++
			c.dropLocked(e)
		}
		return nil, false
	}
	if !ok { // purged meanwhile
		f.Close()
		return nil, false
	}
	p := e.Value.(*Meta)
	p.Hits++
	p.Used = time.Now().UTC()
	c.lru.MoveToFront(e)
	c.st.Hits++
	c.appendLocked(record{Op: opUse, Key: key, At: p.Used})
	return &Hit{Meta: *p, File: f}, true
}

// check opens an entry's file and hashes it against its digest.
func (c *Cache) check(m Meta) (*os.File, error) {
	h, want, err := pkgmeta.ParseSRI(m.SRI)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(c.blob(m.Key))
	if err != nil {
		return nil, err
	}
	n, err := io.Copy(h, f)
	if err == nil && (n != m.Size || !bytes.Equal(h.Sum(nil), want)) {
		err = fmt.Errorf("package cache: entry %s does not match %s", m.Key, m.SRI)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Writer receives an artifact's bytes as they pass; Commit stores them
// when they hash to the digest, Abort throws them away.
type Writer struct {
	c    *Cache
	meta Meta
	f    *os.File
	h    hash.Hash
	want []byte
	err  error
}

// Create starts an entry for an artifact whose digest is meta.SRI.
func (c *Cache) Create(meta Meta) (*Writer, error) {
	h, want, err := pkgmeta.ParseSRI(meta.SRI)
	if err != nil {
		return nil, fmt.Errorf("package cache: %w", err)
	}
	f, err := os.CreateTemp(filepath.Join(c.dir, "tmp"), "entry-*")
	if err != nil {
		return nil, fmt.Errorf("package cache: %w", err)
	}
	meta.Key = Key(meta.Scope, meta.SRI)
	return &Writer{c: c, meta: meta, f: f, h: h, want: want}, nil
}

// Write never fails the caller's stream: an error only spoils the entry.
func (w *Writer) Write(b []byte) (int, error) {
	if w.err == nil {
		w.h.Write(b)
		_, w.err = w.f.Write(b)
		w.meta.Size += int64(len(b))
		if w.meta.Size > w.c.max {
			w.err = errors.New("package cache: artifact larger than the cache")
		}
	}
	return len(b), nil
}

// Abort discards the entry.
func (w *Writer) Abort() {
	if w.f != nil {
		w.f.Close()
		os.Remove(w.f.Name())
		w.f = nil
	}
}

// Commit stores the entry if its bytes hash to its digest.
func (w *Writer) Commit() error {
	defer w.Abort()
	if w.err != nil {
		return w.err
	}
	if !bytes.Equal(w.h.Sum(nil), w.want) {
		return fmt.Errorf("package cache: %s@%s does not match %s: not stored", w.meta.Name, w.meta.Version, w.meta.SRI)
	}
	// No fsync: an entry torn by a crash is found by its size at open
	// or its digest before it is served, and dropped.
	return w.c.commit(w)
}

func (c *Cache) commit(w *Writer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := w.meta
	if _, ok := c.m[m.Key]; ok {
		return nil // stored meanwhile by another download
	}
	if err := c.evictLocked(m.Size); err != nil {
		return err
	}
	dst := c.blob(m.Key)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	if err := os.Rename(w.f.Name(), dst); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	m.Stored = time.Now().UTC()
	m.Used = m.Stored
	c.insertLocked(&m)
	c.st.Stores++
	return c.appendLocked(record{Op: opPut, Meta: &m})
}

func (c *Cache) insertLocked(m *Meta) {
	c.m[m.Key] = c.lru.PushFront(m)
	c.size += m.Size
}
