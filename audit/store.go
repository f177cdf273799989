package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// StoreFile is the store's file name inside the state directory.
const StoreFile = "audit.db"

// ErrNoStore means the store file does not exist (nothing recorded yet, or
// the wrong state directory).
var ErrNoStore = errors.New("audit: no event store")

// Store is the embedded SQLite event store: one row per record, the exact
// JSONL record in raw, and columns only for the indexed filters (rule and
// id are read from raw when a query needs them).
type Store struct {
	path string
	db   *sql.DB // readers
	w    *sql.DB // the single writer connection; nil when read-only
	ck   *sql.DB // the checkpointer's connection; nil when read-only
	ins  inserter
	span span // the newest row of spans, extended by each insert
	// unchecked is set by each write and cleared by a checkpoint that
	// copied the whole WAL: an idle appliance checkpoints nothing.
	unchecked atomic.Bool
	written   chan struct{} // signaled by each write (markWritten): wakes the checkpointer
}

// markWritten notes a write for the checkpointer.
func (s *Store) markWritten() {
	s.unchecked.Store(true)
	select {
	case s.written <- struct{}{}:
	default:
	}
}

// storeLayout is the version of the table layout below, kept in meta under
// "layout". Layout 1 (no such key) had an id and a rule column, composite
// (column, time) indexes and a time index; OpenStore migrates it.
const storeLayout = 2

// insertRows are the row counts of the prepared multi-row INSERTs, largest
// first (9 columns each, within SQLite's limit on bound parameters). A batch is written with the largest that fit, so a batch of
// any size takes few statement executions.
var insertRows = []int{256, 64, 16, 4, 1}

const insertHead = `INSERT INTO events
	(seq, time, kind, sandbox, verdict, category, host, would_deny, raw) VALUES `

func insertSQL(rows int) string {
	return insertHead + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?),", rows), ",")
}

// The kind, verdict and category indexes are partial. Most records are
// dns, flow and http records, allowed, many without a category: a filter
// on one of those values selects a large share of the store, where an
// index does not beat reading the rows in seq order, and leaving them out
// makes every insert cheaper. A query uses a partial index only when its
// WHERE clause repeats the index's condition, so Query.where adds it.
const (
	kindIndexed     = `kind NOT IN ('dns', 'flow', 'http')`
	verdictIndexed  = `verdict NOT IN ('', 'allow')`
	categoryIndexed = `category != ''`
)

// kindIsIndexed reports whether records of kind k are in events_kind_rare.
func kindIsIndexed(k Kind) bool { return k != KindDNS && k != KindFlow && k != KindHTTP }

// Records are inserted in seq order and (almost) in time order, so the
// table's rowid order is time order: instead of a time index on every
// record, spans keeps one row per run of up to spanRecords records with
// the least and greatest time in it. A time filter becomes a seq range
// (the spans that can hold matching records) that the table and the other
// indexes (which end in the rowid) search directly; records out of time
// order stay correct, they only widen a span.
const spanRecords = 4096

const schema = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
	seq        INTEGER PRIMARY KEY,
	time       INTEGER NOT NULL,
	kind       TEXT NOT NULL,
	sandbox    TEXT NOT NULL,
	verdict    TEXT NOT NULL,
	category   TEXT NOT NULL,
	host       TEXT NOT NULL,
	would_deny INTEGER NOT NULL,
	raw        BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS spans (
	first    INTEGER PRIMARY KEY,
	last     INTEGER NOT NULL,
	min_time INTEGER NOT NULL,
	max_time INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS events_sandbox      ON events (sandbox);
CREATE INDEX IF NOT EXISTS events_host         ON events (host);
CREATE INDEX IF NOT EXISTS events_kind_rare    ON events (kind) WHERE ` + kindIndexed + `;
CREATE INDEX IF NOT EXISTS events_verdict_rare ON events (verdict) WHERE ` + verdictIndexed + `;
CREATE INDEX IF NOT EXISTS events_category_set ON events (category) WHERE ` + categoryIndexed + `;
`

// busyTimeout is how long a statement waits for another connection's
// lock before it fails with SQLITE_BUSY (a transient error: the pipeline
// retries it). A variable so a test can make a held lock fail sooner.
var busyTimeout = 10 * time.Second

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "foreign_keys(0)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "auto_vacuum(incremental)")
		q.Add("_pragma", "journal_mode(wal)")
		// Durability trade: in WAL mode synchronous=NORMAL syncs the WAL
		// only at checkpoints, not at every commit. The store stays
		// consistent through a crash or power loss, but the transactions
		// committed since the last checkpoint (normally the last
		// checkpointEvery, 100 ms; at most ~64 MiB of WAL while
		// checkpoints fail) can be rolled back by a power loss or kernel
		// crash; an appliance process crash (kill -9) loses nothing
		// committed. The JSONL stream is the copy to ship off the machine.
		q.Add("_pragma", "synchronous(normal)")
		// Multi-row INSERTs keep a statement journal; in memory it costs
		// no system calls. A bigger page cache keeps a batch's pages from
		// spilling to the WAL before the commit.
		q.Add("_pragma", "temp_store(memory)")
		q.Add("_pragma", "cache_size(-16384)")
		// Checkpoints (copying the WAL into the database) run on their own
		// connection and goroutine (Store.Checkpoint), off the writer's
		// path; the writer checkpoints itself only if the WAL reaches
		// ~64 MiB because they stopped.
		q.Add("_pragma", "wal_autocheckpoint(16384)")
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// OpenStore opens (creating if needed) the store at path for writing.
// Only one process should write a store; any number may read it.
func OpenStore(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: store directory: %w", err)
	}
	if err := privateStoreFiles(path); err != nil {
		return nil, err
	}
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("audit: open store: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxLifetime(0)
	s := &Store{path: path, w: w, written: make(chan struct{}, 1)}
	if err := s.init(); err != nil {
		w.Close()
		return nil, err
	}
	if s.db, err = sql.Open("sqlite", dsn(path, true)); err != nil {
		s.Close()
		return nil, fmt.Errorf("audit: open store: %w", err)
	}
	if s.ck, err = sql.Open("sqlite", dsn(path, false)); err != nil {
		s.Close()
		return nil, fmt.Errorf("audit: open store: %w", err)
	}
	s.ck.SetMaxOpenConns(1)
	s.markWritten() // opening may have written (a migration, a WAL left over)
	return s, nil
}

// StoreMode is the mode of the store and its WAL files: they hold every
// request every sandbox made, for the appliance's user only.
const StoreMode = 0o600

// privateStoreFiles creates the store file StoreMode before SQLite does
// (SQLite creates it 0644 under the usual umask, and gives the WAL and
// shared-memory files the store's mode), and tightens a store, WAL or
// shared-memory file left with a looser mode. A store that is not a
// regular file (a symbolic link, a FIFO) is refused.
func privateStoreFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, StoreMode)
	if err != nil {
		return fmt.Errorf("audit: store %s: %w", path, err)
	}
	st, err := f.Stat()
	f.Close()
	if err != nil {
		return fmt.Errorf("audit: store %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("audit: store %s is not a regular file (%s)", path, st.Mode().Type())
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("audit: store %s: %w", p, err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("audit: store %s is not a regular file (%s)", p, st.Mode().Type())
		}
		if st.Mode().Perm() != StoreMode {
			if err := os.Chmod(p, StoreMode); err != nil {
				return fmt.Errorf("audit: tighten %s to %04o: %w", p, StoreMode, err)
			}
		}
	}
	return nil
}

func (s *Store) init() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := s.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("audit: create store schema in %s: %w", s.path, err)
	}
	layout, err := readLayout(ctx, s.w)
	if err != nil {
		return fmt.Errorf("audit: store %s: %w", s.path, err)
	}
	switch {
	case layout == 1:
		if err := s.migrate1(ctx); err != nil {
			return err
		}
	case layout > storeLayout:
		return fmt.Errorf("audit: store %s has table layout %d, newer than this airlock's (%d)", s.path, layout, storeLayout)
	}
	if _, err := s.w.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("audit: create store schema in %s: %w", s.path, err)
	}
	if _, err := s.w.ExecContext(ctx, `INSERT OR IGNORE INTO meta VALUES ('schema', ?), ('layout', ?)`,
		fmt.Sprint(SchemaVersion), fmt.Sprint(storeLayout)); err != nil {
		return fmt.Errorf("audit: store meta: %w", err)
	}
	err = s.w.QueryRowContext(ctx, `SELECT first, last, min_time, max_time FROM spans ORDER BY first DESC LIMIT 1`).
		Scan(&s.span.first, &s.span.last, &s.span.minTime, &s.span.maxTime)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("audit: store spans: %w", err)
	}
	return nil
}

// querier is what readLayout needs of a *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readLayout returns the store's table layout: the meta value, else 1 when
// the events table is the first layout's (it has a rule column), else 0
// (a new store).
func readLayout(ctx context.Context, db querier) (int, error) {
	var v string
	err := db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'layout'`).Scan(&v)
	if err == nil {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("table layout %q is not a number", v)
		}
		return n, nil
	}
	if !errors.Is(err, sql.ErrNoRows) && !strings.Contains(err.Error(), "no such table") {
		return 0, fmt.Errorf("read table layout: %w", err)
	}
	var old int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('events') WHERE name = 'rule'`).Scan(&old); err != nil {
		return 0, fmt.Errorf("read table layout: %w", err)
	}
	if old > 0 {
		return 1, nil
	}
	return 0, nil
}

// migrate1 rewrites a layout 1 store in the current layout, in one
// transaction: the records and their seq numbers are kept as they are.
func (s *Store) migrate1(ctx context.Context) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit: migrate store %s: %w", s.path, err)
	}
	defer tx.Rollback()
	steps := []string{
		`ALTER TABLE events RENAME TO events_layout1`,
		`DROP INDEX IF EXISTS events_time`, `DROP INDEX IF EXISTS events_sandbox`,
		`DROP INDEX IF EXISTS events_kind`, `DROP INDEX IF EXISTS events_verdict`,
		`DROP INDEX IF EXISTS events_category`, `DROP INDEX IF EXISTS events_verdict_rare`,
		`DROP INDEX IF EXISTS events_category_set`, `DROP INDEX IF EXISTS events_host`,
		schema,
		`INSERT INTO events (seq, time, kind, sandbox, verdict, category, host, would_deny, raw)
			SELECT seq, time, kind, sandbox, verdict, category, host, would_deny, raw FROM events_layout1 ORDER BY seq`,
		`INSERT INTO spans (first, last, min_time, max_time)
			SELECT min(seq), max(seq), min(time), max(time) FROM events GROUP BY (seq - 1) / ` + strconv.Itoa(spanRecords),
		`DROP TABLE events_layout1`,
		`INSERT OR REPLACE INTO meta VALUES ('layout', '` + strconv.Itoa(storeLayout) + `')`,
	}
	for _, q := range steps {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("audit: migrate store %s from table layout 1: %w", s.path, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit: migrate store %s from table layout 1: %w", s.path, err)
	}
	return nil
}

// OpenStoreReadOnly opens an existing store for queries.
func OpenStoreReadOnly(path string) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w at %s", ErrNoStore, path)
		}
		return nil, fmt.Errorf("audit: open store: %w", err)
	}
	db, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return nil, fmt.Errorf("audit: open store: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	layout, err := readLayout(ctx, db)
	if err == nil && layout != 0 && layout != storeLayout {
		err = fmt.Errorf("table layout %d, this airlock reads layout %d; opening it for writing (airlock serve) migrates an older one", layout, storeLayout)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("audit: store %s: %w", path, err)
	}
	return &Store{path: path, db: db}, nil
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// Close closes the store. It is safe on a partly opened store.
func (s *Store) Close() error {
	var errs []error
	if s.w != nil {
		if c, err := s.w.Conn(context.Background()); err == nil {
			errs = append(errs, c.Raw(func(any) error { return s.ins.close() }), c.Close())
		}
		errs = append(errs, s.w.Close())
	}
	if s.db != nil {
		errs = append(errs, s.db.Close())
	}
	if s.ck != nil {
		errs = append(errs, s.ck.Close())
	}
	return errors.Join(errs...)
}

// Checkpoint copies what the WAL holds into the database file without
// blocking the writer or readers (a passive checkpoint). The pipeline
// calls it every checkpointEvery.
func (s *Store) Checkpoint(ctx context.Context) error {
	if s.ck == nil || !s.unchecked.Swap(false) {
		return nil
	}
	var busy, log, done int
	if err := s.ck.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err != nil {
		s.markWritten()
		return fmt.Errorf("audit: store checkpoint: %w", err)
	}
	if busy != 0 || done < log { // readers held part of the WAL: again next time
		s.markWritten()
	}
	return nil
}

// insert writes lines in one transaction. On error nothing is written.
func (s *Store) insert(ctx context.Context, lines []line) error {
	c, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("audit: store connection: %w", err)
	}
	defer c.Close()
	return c.Raw(func(dc any) error {
		next, err := s.ins.write(ctx, dc, lines, s.span)
		if err == nil {
			s.span = next
		}
		s.markWritten() // a failed write may have grown the WAL too
		return err
	})
}

// last returns the newest record, to continue the chain after a restart.
func (s *Store) last(ctx context.Context) ([]byte, error) {
	var raw []byte
	err := s.w.QueryRowContext(ctx, `SELECT raw FROM events ORDER BY seq DESC LIMIT 1`).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: read last record: %w", err)
	}
	return raw, nil
}

// Size is the bytes the store's pages hold (excluding free pages).
func (s *Store) Size(ctx context.Context) (int64, error) {
	var pages, free, size int64
	db := s.db
	if s.w != nil {
		db = s.w
	}
	if err := db.QueryRowContext(ctx, `SELECT page_count, freelist_count, page_size FROM pragma_page_count, pragma_freelist_count, pragma_page_size`).Scan(&pages, &free, &size); err != nil {
		return 0, fmt.Errorf("audit: store size: %w", err)
	}
	return (pages - free) * size, nil
}
