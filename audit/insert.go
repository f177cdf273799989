package audit

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
)

// inserter writes batches through the SQLite driver's own statement API
// (database/sql's Conn.Raw): a batch binds thousands of values, and
// database/sql would convert and check each of them again on every
// execution. Its statements belong to one driver connection and are
// prepared again if the pool ever hands out another.
type inserter struct {
	conn  any           // the driver connection the statements belong to
	rows  []driver.Stmt // rows[i] inserts insertRows[i] rows at once
	spans driver.Stmt   // upserts one row of spans
	args  []driver.NamedValue
}

// driverConn is what the inserter needs of the SQLite driver's connection.
type driverConn interface {
	driver.ConnPrepareContext
	driver.ConnBeginTx
}

// span is one row of the spans table.
type span struct {
	first, last      uint64
	minTime, maxTime int64
}

// extend adds a record to s; ok is false when s is full (or empty) and the
// record starts a new span.
func (s *span) extend(seq uint64, t int64) bool {
	if s.first == 0 || seq < s.first || seq-s.first >= spanRecords {
		return false
	}
	s.last = max(s.last, seq)
	s.minTime, s.maxTime = min(s.minTime, t), max(s.maxTime, t)
	return true
}

func (in *inserter) prepare(ctx context.Context, dc any) (driverConn, error) {
	c, ok := dc.(driverConn)
	if !ok {
		return nil, fmt.Errorf("audit: sqlite driver connection %T cannot prepare statements", dc)
	}
	if in.conn == dc {
		return c, nil
	}
	in.close()
	for _, n := range insertRows {
		st, err := c.PrepareContext(ctx, insertSQL(n))
		if err != nil {
			in.close()
			return nil, fmt.Errorf("audit: prepare insert: %w", err)
		}
		in.rows = append(in.rows, st)
	}
	st, err := c.PrepareContext(ctx, `INSERT OR REPLACE INTO spans (first, last, min_time, max_time) VALUES (?, ?, ?, ?)`)
	if err != nil {
		in.close()
		return nil, fmt.Errorf("audit: prepare spans: %w", err)
	}
	in.spans, in.conn = st, dc
	return c, nil
}

func (in *inserter) close() error {
	var errs []error
	for _, st := range in.rows {
		errs = append(errs, st.Close())
	}
	if in.spans != nil {
		errs = append(errs, in.spans.Close())
	}
	in.rows, in.spans, in.conn = nil, nil, nil
	return errors.Join(errs...)
}

// write inserts lines and extends the spans in one transaction on dc. It
// returns the newest span; on error nothing is written.
func (in *inserter) write(ctx context.Context, dc any, lines []line, cur span) (span, error) {
	c, err := in.prepare(ctx, dc)
	if err != nil {
		return cur, err
	}
	tx, err := c.BeginTx(ctx, driver.TxOptions{})
	if err != nil {
		return cur, fmt.Errorf("audit: store begin: %w", err)
	}
	next, err := in.writeTx(ctx, lines, cur)
	if err != nil {
		tx.Rollback()
		return cur, err
	}
	if err := tx.Commit(); err != nil {
		return cur, fmt.Errorf("audit: store commit: %w", err)
	}
	return next, nil
}

func (in *inserter) writeTx(ctx context.Context, lines []line, cur span) (span, error) {
	for rest := lines; len(rest) > 0; {
		i := 0
		for insertRows[i] > len(rest) {
			i++
		}
		n := insertRows[i]
		if err := in.exec(ctx, in.rows[i], rest[:n]); err != nil {
			return cur, fmt.Errorf("audit: store insert seq %d..%d: %w", rest[0].seq, rest[n-1].seq, err)
		}
		rest = rest[n:]
	}
	for _, l := range lines {
		if cur.extend(l.seq, l.rec.time) {
			continue
		}
		if err := in.putSpan(ctx, cur); err != nil {
			return cur, err
		}
		cur = span{first: l.seq, last: l.seq, minTime: l.rec.time, maxTime: l.rec.time}
	}
	return cur, in.putSpan(ctx, cur)
}

func (in *inserter) exec(ctx context.Context, st driver.Stmt, lines []line) error {
	a := in.args[:0]
	for i := range lines {
		l := &lines[i]
		r := l.rec
		a = append(a,
			driver.NamedValue{Ordinal: len(a) + 1, Value: int64(l.seq)},
			driver.NamedValue{Ordinal: len(a) + 2, Value: r.time},
			driver.NamedValue{Ordinal: len(a) + 3, Value: string(r.kind)},
			driver.NamedValue{Ordinal: len(a) + 4, Value: r.sandbox},
			driver.NamedValue{Ordinal: len(a) + 5, Value: r.verdict},
			driver.NamedValue{Ordinal: len(a) + 6, Value: r.category},
			driver.NamedValue{Ordinal: len(a) + 7, Value: r.host},
			driver.NamedValue{Ordinal: len(a) + 8, Value: r.wouldDeny},
			driver.NamedValue{Ordinal: len(a) + 9, Value: l.raw})
	}
	in.args = a
	_, err := st.(driver.StmtExecContext).ExecContext(ctx, a)
	clear(a) // keep no record alive through the reused slice
	return err
}

func (in *inserter) putSpan(ctx context.Context, s span) error {
	if s.first == 0 {
		return nil
	}
	_, err := in.spans.(driver.StmtExecContext).ExecContext(ctx, []driver.NamedValue{
		{Ordinal: 1, Value: int64(s.first)}, {Ordinal: 2, Value: int64(s.last)},
		{Ordinal: 3, Value: s.minTime}, {Ordinal: 4, Value: s.maxTime}})
	if err != nil {
		return fmt.Errorf("audit: store spans: %w", err)
	}
	return nil
}
