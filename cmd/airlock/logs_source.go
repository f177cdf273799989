//go:build !airlock_thin

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"airlock/audit"
	"airlock/client"
)

// stateDirDefault is $AIRLOCK_STATE_DIR, else /var/lib/airlock.
func stateDirDefault() string {
	if d := os.Getenv("AIRLOCK_STATE_DIR"); d != "" {
		return d
	}
	return defaultStateDir
}

// eventSource is where `airlock logs` reads events: the store, JSONL files
// or the control API. Each calls fn for the matching events, oldest
// first; with limit > 0 only the newest limit of them.
type eventSource interface {
	each(ctx context.Context, f *audit.Filter, limit int, fn func(audit.Event) error) error
	// follow calls fn for matching events written after the ones each
	// gave, until ctx ends.
	follow(ctx context.Context, f *audit.Filter, fn func(audit.Event) error) error
	close()
}

// sourceFlags choose the source.
type sourceFlags struct {
	stateDir string
	input    []string
	api      bool
	poll     time.Duration // --follow on the store
	stdin    io.Reader
	stderr   io.Writer
	fs       *pflag.FlagSet
}

func (s *sourceFlags) add(fs *pflag.FlagSet) {
	s.fs = fs
	fs.StringVar(&s.stateDir, "state-dir", stateDirDefault(), "state directory holding the event store ("+audit.StoreFile+"); default $AIRLOCK_STATE_DIR or "+defaultStateDir)
	fs.StringArrayVarP(&s.input, "input", "i", nil, "read JSONL stream files instead of the store (repeatable; a rotated set in any order, .gz too; either stream flavor, airlock or ocsf; - for stdin; an "+audit.StoreFile+" file is opened as a store), e.g. --input /var/log/airlock/events.jsonl")
	fs.BoolVar(&s.api, "api", false, "ask the running appliance over the control socket (no read access to the state directory needed; see --socket)")
	fs.StringVar(&socketFlag, "socket", "", "control socket of airlock serve, with --api (default $AIRLOCK_SOCKET or "+client.DefaultSocket+")")
}

func (s *sourceFlags) open(ctx context.Context) (eventSource, error) {
	switch {
	case len(s.input) > 0 && s.api:
		return nil, usagef("--input and --api exclude each other")
	case len(s.input) == 1 && isStoreFile(s.input[0]):
		return openStoreSource(s.input[0], s.poll)
	case len(s.input) > 0:
		return &fileSource{paths: s.input, stdin: s.stdin}, nil
	case s.api:
		return &apiSource{c: apiClient()}, nil
	}
	src, err := openStore(filepath.Join(s.stateDir, audit.StoreFile), s.poll)
	if err == nil {
		return src, nil
	}
	if !errors.Is(err, fs.ErrPermission) || s.fs == nil || s.fs.Changed("state-dir") {
		return nil, err
	}
	// Not root and not allowed to read the store: the appliance answers
	// the same query for members of its group.
	if _, herr := apiClient().Health(ctx); herr != nil {
		return nil, fmt.Errorf("%w; the control API did not answer either (%v): use --input FILE with a copy of the JSONL stream", err, herr)
	}
	if s.stderr != nil {
		fmt.Fprintf(s.stderr, "airlock: cannot read %s (%v); asking the appliance over its control socket instead\n", s.stateDir, err)
	}
	return &apiSource{c: apiClient()}, nil
}

// isStoreFile reports whether path starts with SQLite's magic.
func isStoreFile(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 16)
	n, _ := io.ReadFull(f, b)
	return n == 16 && string(b) == "SQLite format 3\x00"
}

// openStore opens the default store (a variable for the test of the
// fallback to the API, which root cannot provoke with file modes).
var openStore = openStoreSource

type storeSource struct {
	st      *audit.Store
	poll    time.Duration // how often follow checks for new records
	lastSeq uint64
}

func openStoreSource(path string, poll time.Duration) (*storeSource, error) {
	st, err := audit.OpenStoreReadOnly(path)
	if err != nil {
		return nil, fmt.Errorf("%w (is --state-dir right? airlock serve writes it; without read access use --api or --input FILE)", err)
	}
	return &storeSource{st: st, poll: poll}, nil
}

func (s *storeSource) close() { s.st.Close() }

func (s *storeSource) each(ctx context.Context, f *audit.Filter, limit int, fn func(audit.Event) error) error {
	q, exact := f.Pushdown()
	// Snapshot the newest seq first: a follow continues after it.
	var err error
	if q.UpToSeq, err = s.st.MaxSeq(ctx); err != nil || q.UpToSeq == 0 {
		return err // 0: the store is empty (and 0 would mean no bound)
	}
	s.lastSeq = q.UpToSeq
	if exact {
		q.Limit, q.Newest = limit, limit > 0
		return s.st.Each(ctx, q, fn)
	}
	return eachNewest(limit, fn, func(keep func(audit.Event) error) error {
		return s.st.Each(ctx, q, matching(f, keep))
	})
}

func (s *storeSource) follow(ctx context.Context, f *audit.Filter, fn func(audit.Event) error) error {
	q, _ := f.Pushdown()
	q.AfterSeq = s.lastSeq
	return s.st.Follow(ctx, q, s.poll, matching(f, fn))
}

type fileSource struct {
	paths []string
	stdin io.Reader
}

func (s *fileSource) close() {}

func (s *fileSource) each(_ context.Context, f *audit.Filter, limit int, fn func(audit.Event) error) error {
	return eachNewest(limit, fn, func(keep func(audit.Event) error) error {
		return audit.ReadJSONL(s.paths, s.stdin, matching(f, keep))
	})
}

func (s *fileSource) follow(context.Context, *audit.Filter, func(audit.Event) error) error {
	return fmt.Errorf("--follow reads the store or the API; to follow a file, pipe it: tail -F FILE | airlock logs --input -")
}

// apiSource asks the appliance; lastSeq is the newest record each saw,
// where follow starts (so nothing written in between is missed).
type apiSource struct {
	c       *client.Client
	lastSeq uint64
}

func (*apiSource) close() {}

func (s *apiSource) each(ctx context.Context, f *audit.Filter, limit int, fn func(audit.Event) error) error {
	q, exact := f.Pushdown()
	seen := func(next func(audit.Event) error) func(audit.Event) error {
		return func(e audit.Event) error { s.lastSeq = max(s.lastSeq, e.Seq); return next(e) }
	}
	if exact {
		q.Limit, q.Newest = limit, limit > 0
		return s.c.Logs(ctx, q, seen(fn))
	}
	return eachNewest(limit, fn, func(keep func(audit.Event) error) error {
		return s.c.Logs(ctx, q, seen(matching(f, keep)))
	})
}

func (s *apiSource) follow(ctx context.Context, f *audit.Filter, fn func(audit.Event) error) error {
	q, _ := f.Pushdown()
	q.AfterSeq = s.lastSeq
	return s.c.FollowLogs(ctx, q, matching(f, fn))
}

func matching(f *audit.Filter, fn func(audit.Event) error) func(audit.Event) error {
	return func(e audit.Event) error {
		if !f.Matches(&e) {
			return nil
		}
		return fn(e)
	}
}

// eachNewest runs read, passing every event on to fn, or with limit > 0
// only the newest limit of them (kept in a ring, given oldest first).
func eachNewest(limit int, fn func(audit.Event) error, read func(func(audit.Event) error) error) error {
	if limit <= 0 {
		return read(fn)
	}
	ring := make([]audit.Event, 0, min(limit, 1024))
	next := 0
	err := read(func(e audit.Event) error {
		if len(ring) < limit {
			ring = append(ring, e)
			return nil
		}
		ring[next] = e
		next = (next + 1) % limit
		return nil
	})
	if err != nil {
		return err
	}
	for i := range ring {
		if err := fn(ring[(next+i)%len(ring)]); err != nil {
			return err
		}
	}
	return nil
}
