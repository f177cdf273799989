package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// StoreFile is the store's file name inside the state directory.
const StoreFile = "audit.db"

// ErrNoStore means the store file does not exist (nothing recorded yet, or
// the wrong state directory).
var ErrNoStore = errors.New("audit: no event store")

// Store is the embedded SQLite event store: one row per record, the exact
// JSONL record in raw, and indexed columns for the filters.
type Store struct {
	path string
	db   *sql.DB     // readers
	w    *sql.DB     // the single writer connection; nil when read-only
	ins  []*sql.Stmt // ins[i] inserts insertRows[i] rows at once
}

// insertRows are the row counts of the prepared multi-row INSERTs, largest
// first (11 columns each, within SQLite's limit on bound parameters). A
// batch is written with the largest that fit, so a batch of any size takes
// few statement executions.
var insertRows = []int{256, 64, 16, 4, 1}

const insertCols = `INSERT INTO events
	(seq, time, kind, sandbox, id, verdict, category, rule, host, would_deny, raw) VALUES `

func insertSQL(rows int) string {
	return insertCols + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?),", rows), ",")
}

// The verdict and category indexes are partial: most records are allowed
// (and a verdict = 'allow' filter selects most of the store, where an index
// does not help), and many have no category; leaving them out makes every
// insert cheaper. A query uses a partial index only when its WHERE clause
// repeats the index's condition, so Query.where adds it.
const (
	verdictIndexed  = `verdict NOT IN ('', 'allow')`
	categoryIndexed = `category != ''`
)

const schema = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
	seq        INTEGER PRIMARY KEY,
	time       INTEGER NOT NULL,
	kind       TEXT NOT NULL,
	sandbox    TEXT NOT NULL,
	id         TEXT NOT NULL,
	verdict    TEXT NOT NULL,
	category   TEXT NOT NULL,
	rule       TEXT NOT NULL,
	host       TEXT NOT NULL,
	would_deny INTEGER NOT NULL,
	raw        BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS events_time     ON events (time);
CREATE INDEX IF NOT EXISTS events_sandbox  ON events (sandbox, time);
CREATE INDEX IF NOT EXISTS events_kind     ON events (kind, time);
DROP INDEX IF EXISTS events_verdict;
DROP INDEX IF EXISTS events_category;
CREATE INDEX IF NOT EXISTS events_verdict_rare ON events (verdict, time) WHERE ` + verdictIndexed + `;
CREATE INDEX IF NOT EXISTS events_category_set ON events (category, time) WHERE ` + categoryIndexed + `;
CREATE INDEX IF NOT EXISTS events_host     ON events (host);
`

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(0)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "auto_vacuum(incremental)")
		q.Add("_pragma", "journal_mode(wal)")
		// Durability trade: in WAL mode synchronous=NORMAL syncs the WAL
		// only at checkpoints, not at every commit. The store stays
		// consistent through a crash or power loss, but the transactions
		// committed since the last checkpoint (at most ~4 MiB of WAL,
		// seconds of events) can be rolled back by a power loss or kernel
		// crash; an appliance process crash (kill -9) loses nothing
		// committed. The JSONL stream is the copy to ship off the machine.
		q.Add("_pragma", "synchronous(normal)")
		// Multi-row INSERTs keep a statement journal; in memory it costs
		// no system calls. A bigger page cache keeps a batch's pages from
		// spilling to the WAL before the commit.
		q.Add("_pragma", "temp_store(memory)")
		q.Add("_pragma", "cache_size(-16384)")
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// OpenStore opens (creating if needed) the store at path for writing.
// Only one process should write a store; any number may read it.
func OpenStore(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("audit: store directory: %w", err)
	}
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("audit: open store: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxLifetime(0)
	s := &Store{path: path, w: w}
	if err := s.init(); err != nil {
		w.Close()
		return nil, err
	}
	if s.db, err = sql.Open("sqlite", dsn(path, true)); err != nil {
		s.Close()
		return nil, fmt.Errorf("audit: open store: %w", err)
	}
	return s, nil
}

func (s *Store) init() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.w.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("audit: create store schema in %s: %w", s.path, err)
	}
	if _, err := s.w.ExecContext(ctx, `INSERT OR IGNORE INTO meta VALUES ('schema', ?)`, fmt.Sprint(SchemaVersion)); err != nil {
		return fmt.Errorf("audit: store meta: %w", err)
	}
	for _, n := range insertRows {
		st, err := s.w.PrepareContext(ctx, insertSQL(n))
		if err != nil {
			return fmt.Errorf("audit: prepare insert: %w", err)
		}
		s.ins = append(s.ins, st)
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
	return &Store{path: path, db: db}, nil
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// Close closes the store. It is safe on a partly opened store.
func (s *Store) Close() error {
	var errs []error
	for _, st := range s.ins {
		errs = append(errs, st.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if s.db != nil {
		errs = append(errs, s.db.Close())
	}
	return errors.Join(errs...)
}

// insert writes lines in one transaction. On error nothing is written.
func (s *Store) insert(ctx context.Context, lines []line) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit: store begin: %w", err)
	}
	if err := s.insertAll(ctx, tx, lines); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		tx.Rollback()
		return fmt.Errorf("audit: store commit: %w", err)
	}
	return nil
}

func (s *Store) insertAll(ctx context.Context, tx *sql.Tx, lines []line) error {
	args := make([]any, 0, 11*insertRows[0])
	stmts := make([]*sql.Stmt, len(s.ins))
	for len(lines) > 0 {
		i := 0
		for insertRows[i] > len(lines) {
			i++
		}
		if stmts[i] == nil {
			stmts[i] = tx.StmtContext(ctx, s.ins[i])
		}
		n, st := insertRows[i], stmts[i]
		args = args[:0]
		for i := range lines[:n] {
			r := lines[i].rec
			args = append(args, int64(lines[i].seq), r.time, string(r.kind), r.sandbox, r.id,
				r.verdict, r.category, r.rule, r.host, r.wouldDeny, lines[i].raw)
		}
		if _, err := st.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("audit: store insert seq %d..%d: %w", lines[0].seq, lines[n-1].seq, err)
		}
		lines = lines[n:]
	}
	return nil
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
