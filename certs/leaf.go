package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

// DefaultCacheSize bounds the leaf cache: a flood of unique names evicts
// the least recently used leaves instead of growing memory.
const DefaultCacheSize = 4096

// Leaf lifetimes: a leaf is valid for leafValidity and is re-minted once
// less than leafRenew of it remains.
const (
	leafValidity = 24 * time.Hour
	leafRenew    = time.Hour
)

// maxNameLen bounds a server name accepted for minting (DNS limit).
const maxNameLen = 253

type leafCache struct {
	ca    *CA
	lru   *lru.Cache[string, *tls.Certificate]
	group singleflight.Group
}

func newLeafCache(ca *CA, size int) (*leafCache, error) {
	if size <= 0 {
		size = DefaultCacheSize
	}
	c, err := lru.New[string, *tls.Certificate](size)
	if err != nil {
		return nil, fmt.Errorf("certs: leaf cache: %w", err)
	}
	return &leafCache{ca: ca, lru: c}, nil
}

func (c *leafCache) purge() { c.lru.Purge() }

// Leaf returns a certificate for name signed by the CA, from the cache when
// a fresh one is there. Concurrent calls for one name mint once.
func (ca *CA) Leaf(name string) (*tls.Certificate, error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if err := validName(name); err != nil {
		return nil, err
	}
	c := ca.cache
	if cert, ok := c.lru.Get(name); ok && fresh(cert, time.Now()) {
		return cert, nil
	}
	v, err, _ := c.group.Do(name, func() (any, error) {
		if cert, ok := c.lru.Get(name); ok && fresh(cert, time.Now()) {
			return cert, nil
		}
		cert, err := ca.mint(name)
		if err != nil {
			return nil, err
		}
		c.lru.Add(name, cert)
		return cert, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*tls.Certificate), nil
}

// CacheLen reports how many leaves are cached.
func (ca *CA) CacheLen() int { return ca.cache.lru.Len() }

func fresh(c *tls.Certificate, now time.Time) bool {
	return c.Leaf != nil && now.Add(leafRenew).Before(c.Leaf.NotAfter)
}

func validName(name string) error {
	if name == "" {
		return errors.New("certs: empty server name")
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("certs: server name longer than %d bytes", maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		ok := b == '-' || b == '.' || b == '_' || b == ':' || b == '*' ||
			(b >= 'a' && b <= 'z') || (b >= '0' && b <= '9')
		if !ok {
			return fmt.Errorf("certs: server name has byte %#02x", b)
		}
	}
	return nil
}

func (ca *CA) mint(name string) (*tls.Certificate, error) {
	ca.mu.RLock()
	tmpl, leafKey := ca.tmpl, ca.leafKey
	ca.mu.RUnlock()
	parent := tmpl.parent
	now := time.Now().Truncate(time.Second)
	notAfter := now.Add(leafValidity)
	if notAfter.After(parent.NotAfter) {
		notAfter = parent.NotAfter
	}
	der, err := tmpl.sign(name, serial(), now.Add(-time.Hour), notAfter)
	if err != nil {
		return nil, fmt.Errorf("certs: mint %q: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: mint %q: %w", name, err)
	}
	return &tls.Certificate{
		Certificate: [][]byte{der, parent.Raw},
		PrivateKey:  leafKey,
		Leaf:        leaf,
	}, nil
}
