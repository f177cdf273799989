package dnsd

import "sync"

// memoMax bounds each memo; when full it starts over.
const memoMax = 4096

// strMemo remembers the strings of a bounded set of comparable keys, so the
// per-query event formats each client, server address and rule once
// instead of allocating a new string every query.
type strMemo[K comparable] struct {
	mu sync.RWMutex
	m  map[K]string
}

// get returns f(k), from the memo when it has it.
func (c *strMemo[K]) get(k K, f func(K) string) string {
	c.mu.RLock()
	s, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return s
	}
	s = f(k)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= memoMax {
		c.m = make(map[K]string)
	}
	c.m[k] = s
	c.mu.Unlock()
	return s
}
