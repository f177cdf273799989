package pkgcache

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The index is a journal (index.log): one record a line, each line
// "SHA256HEX JSON" so a torn or altered line is found and dropped. It is
// rewritten whole (compacted) at open and when it grows to more than
// twice the entries.

const indexFile = "index.log"

// maxIndexLine bounds one journal line.
const maxIndexLine = 64 << 10

const (
	opPut = "put"
	opDel = "del"
	opUse = "use"
)

type record struct {
	Op   string    `json:"op"`
	Key  string    `json:"key,omitempty"`
	At   time.Time `json:"at,omitzero"`
	Meta *Meta     `json:"meta,omitempty"`
}

func encodeRecord(r record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	line := make([]byte, 0, 65+len(b)+1)
	line = append(line, hex.EncodeToString(sum[:])...)
	line = append(line, ' ')
	line = append(line, b...)
	return append(line, '\n'), nil
}

// decodeRecord checks one line's digest and decodes it.
func decodeRecord(line []byte) (record, error) {
	var r record
	sumHex, body, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return r, errors.New("no digest")
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != string(sumHex) {
		return r, errors.New("digest mismatch")
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, err
	}
	switch {
	case r.Op == opPut && r.Meta != nil && validKey(r.Meta.Key) && r.Meta.Key == Key(r.Meta.Scope, r.Meta.SRI) && r.Meta.Size >= 0:
	case (r.Op == opDel || r.Op == opUse) && validKey(r.Key):
	default:
		return r, fmt.Errorf("bad record %q", r.Op)
	}
	return r, nil
}

func validKey(k string) bool {
	if len(k) != 64 {
		return false
	}
	_, err := hex.DecodeString(k)
	return err == nil
}

func (c *Cache) appendLocked(r record) error {
	if c.jf == nil {
		return errors.New("package cache: closed")
	}
	line, err := encodeRecord(r)
	if err == nil {
		_, err = c.jf.Write(line)
	}
	if err != nil {
		return fmt.Errorf("package cache: index: %w", err)
	}
	c.lines++
	if c.lines > 2*c.lru.Len()+256 {
		return c.compactLocked()
	}
	return nil
}

// load replays the journal, drops entries whose file is gone or of the
// wrong size, removes files no entry names, and compacts.
func (c *Cache) load() error {
	if err := c.replay(filepath.Join(c.dir, indexFile)); err != nil {
		return err
	}
	for e := c.lru.Front(); e != nil; {
		next := e.Next()
		m := e.Value.(*Meta)
		if fi, err := os.Stat(c.blob(m.Key)); err != nil || !fi.Mode().IsRegular() || fi.Size() != m.Size {
			c.lru.Remove(e)
			delete(c.m, m.Key)
			c.size -= m.Size
			c.st.Corrupt++
		}
		e = next
	}
	c.sweep()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.compactLocked(); err != nil {
		return err
	}
	return c.evictLocked(0)
}

func (c *Cache) replay(file string) error {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("package cache: index: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), maxIndexLine)
	for sc.Scan() {
		r, err := decodeRecord(sc.Bytes())
		if err != nil {
			c.st.Corrupt++
			continue
		}
		c.apply(r)
	}
	if err := sc.Err(); err != nil {
		c.st.Corrupt++ // an overlong line: the rest of the journal is lost
	}
	return nil
}

func (c *Cache) apply(r record) {
	switch r.Op {
	case opPut:
		if e, ok := c.m[r.Meta.Key]; ok {
			c.size -= e.Value.(*Meta).Size
			c.lru.Remove(e)
		}
		m := *r.Meta
		c.insertLocked(&m)
	case opDel:
		if e, ok := c.m[r.Key]; ok {
			c.lru.Remove(e)
			delete(c.m, r.Key)
			c.size -= e.Value.(*Meta).Size
		}
	case opUse:
		if e, ok := c.m[r.Key]; ok {
			m := e.Value.(*Meta)
			m.Hits++
			m.Used = r.At
			c.lru.MoveToFront(e)
		}
	}
}

// sweep removes files no entry names and unfinished entries.
func (c *Cache) sweep() {
	os.RemoveAll(filepath.Join(c.dir, "tmp"))
	os.MkdirAll(filepath.Join(c.dir, "tmp"), 0o700)
	filepath.WalkDir(filepath.Join(c.dir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if _, ok := c.m[d.Name()]; !ok || p != c.blob(d.Name()) {
			os.Remove(p)
		}
		return nil
	})
}

// compactLocked writes the index anew (oldest entry first) and swaps it in.
func (c *Cache) compactLocked() error {
	tmp, err := os.CreateTemp(c.dir, ".index-*")
	if err != nil {
		return fmt.Errorf("package cache: index: %w", err)
	}
	w := bufio.NewWriter(tmp)
	for e := c.lru.Back(); e != nil && err == nil; e = e.Prev() {
		var line []byte
		if line, err = encodeRecord(record{Op: opPut, Meta: e.Value.(*Meta)}); err == nil {
			_, err = w.Write(line)
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(c.dir, indexFile))
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("package cache: index: %w", err)
	}
	if c.jf != nil {
		c.jf.Close()
	}
	c.jf, c.lines = tmp, c.lru.Len()
	return nil
}
