package serve

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
)

// principalStore holds the running principals: control.principals_file
// plus control.token_file's admin "token". Reload swaps them atomically;
// a broken file keeps the running version (like a policy reload).
type principalStore struct {
	file  string // "" = none
	token string // control.token_file's token, "" = none
	log   *slog.Logger

	mu  sync.Mutex // serializes reloads
	cur atomic.Pointer[Principals]
}

// newPrincipalStore loads file (may be "") and adds token (may be ""). A
// broken file fails the start: there is no running version to keep.
func newPrincipalStore(file, token string, log *slog.Logger) (*principalStore, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &principalStore{file: file, token: token, log: log}
	ps, err := s.read()
	if err != nil {
		return nil, err
	}
	s.cur.Store(ps)
	return s, nil
}

func (s *principalStore) read() (*Principals, error) {
	var ps *Principals
	if s.file != "" {
		var err error
		if ps, err = LoadPrincipals(s.file); err != nil {
			return nil, err
		}
	}
	return ps.withToken(s.token), nil
}

// Current is the running version.
func (s *principalStore) Current() *Principals {
	if s == nil {
		return nil
	}
	return s.cur.Load()
}

// Reload re-reads the principals file. On error the running version stays
// and the error says why; by names who asked (SIGHUP, a principal).
func (s *principalStore) Reload(by string) error {
	if s == nil || s.file == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ps, err := s.read()
	if err != nil {
		s.log.Error("principals file rejected; the running principals stay", "file", s.file, "by", by, "err", err)
		return fmt.Errorf("reload principals: %w", err)
	}
	s.cur.Store(ps)
	s.log.Info("principals reloaded", "file", s.file, "by", by, "principals", ps.Names())
	return nil
}
