package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// ruleExpr is a record's rule: the store has no column for it (a rule
// filter is rare and reads only the rows the other filters leave).
const ruleExpr = `coalesce(json_extract(raw, '$.rule'), '')`

// sqlWhere renders the filter as SQL with its arguments.
func sqlWhere(q *Query) (string, []any) {
	var conds []string
	var args []any
	add := func(c string, a ...any) { conds = append(conds, c); args = append(args, a...) }
	if q.Sandbox != "" {
		add("sandbox = ?", q.Sandbox)
	}
	switch {
	case q.Kind == "":
	case kindIsIndexed(q.Kind):
		add("kind = ? AND "+kindIndexed, string(q.Kind))
	default:
		add("kind = ?", string(q.Kind))
	}
	switch v := strings.ToLower(q.Verdict); v {
	case "":
	case "would_deny", "would-deny":
		add("would_deny = 1")
	case "allow":
		add("verdict = ?", v)
	default:
		add("verdict = ? AND "+verdictIndexed, v)
	}
	if q.Category != "" {
		add("category = ? AND "+categoryIndexed, q.Category)
	}
	if q.Rule != "" {
		add("("+ruleExpr+" = ? OR substr("+ruleExpr+", 1, ?) = ?)", q.Rule, len(q.Rule)+2, q.Rule+" (")
	}
	if q.Host != "" {
		add("host GLOB ?", strings.ToLower(strings.TrimSuffix(q.Host, ".")))
	}
	// A time bound is also a seq bound, from the spans that can hold
	// matching records (see spanRecords): the table and every index search
	// by seq.
	if !q.Since.IsZero() {
		add("seq >= (SELECT coalesce(min(first), 9223372036854775807) FROM spans WHERE max_time >= ?) AND time >= ?",
			q.Since.UnixNano(), q.Since.UnixNano())
	}
	if !q.Until.IsZero() {
		add("seq <= (SELECT coalesce(max(last), 0) FROM spans WHERE min_time < ?) AND time < ?",
			q.Until.UnixNano(), q.Until.UnixNano())
	}
	if q.AfterSeq > 0 {
		add("seq > ?", int64(q.AfterSeq))
	}
	if q.UpToSeq > 0 {
		add("seq <= ?", int64(q.UpToSeq))
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// Each calls fn for every matching record, oldest first. It stops at the
// first error fn returns and returns it.
func (s *Store) Each(ctx context.Context, q Query, fn func(Event) error) error {
	where, args := sqlWhere(&q)
	sqlq := `SELECT raw FROM events` + where + ` ORDER BY seq`
	if q.Limit > 0 && q.Newest {
		sqlq = `SELECT raw FROM (SELECT seq, raw FROM events` + where + ` ORDER BY seq DESC LIMIT ?) ORDER BY seq`
		args = append(args, q.Limit)
	} else if q.Limit > 0 {
		sqlq += ` LIMIT ?`
		args = append(args, q.Limit)
	}
	rows, err := s.db.QueryContext(ctx, sqlq, args...)
	if err != nil {
		return fmt.Errorf("audit: query: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return fmt.Errorf("audit: query: %w", err)
		}
		var e Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return fmt.Errorf("audit: stored record is not valid JSON: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("audit: query: %w", err)
	}
	return nil
}

// Query returns the matching records, oldest first.
func (s *Store) Query(ctx context.Context, q Query) ([]Event, error) {
	var out []Event
	err := s.Each(ctx, q, func(e Event) error { out = append(out, e); return nil })
	return out, err
}

// MaxSeq is the newest record's sequence number (0 when empty).
func (s *Store) MaxSeq(ctx context.Context) (uint64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM events`).Scan(&n); err != nil {
		return 0, fmt.Errorf("audit: max seq: %w", err)
	}
	return uint64(n), nil
}

// Follow calls fn for each matching record written after q.AfterSeq, as
// it arrives, polling the store every poll interval, until ctx ends or fn
// returns an error. It works from another process than the writer.
func (s *Store) Follow(ctx context.Context, q Query, poll time.Duration, fn func(Event) error) error {
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	q.Limit, q.Newest, q.UpToSeq = 0, false, 0
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		err := s.Each(ctx, q, func(e Event) error {
			q.AfterSeq = max(q.AfterSeq, e.Seq)
			return fn(e)
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// TopRow is one line of a top list.
type TopRow struct {
	Host      string `json:"host"`
	Rule      string `json:"rule,omitempty"`
	Category  string `json:"category,omitempty"`
	Count     int64  `json:"count"`
	Denied    int64  `json:"denied"`
	Sandboxes int64  `json:"sandboxes"`
	BytesUp   int64  `json:"bytes_up"`
	BytesDown int64  `json:"bytes_down"`
}

// httpOwnBytes is an http record's bytes (dir "up" or "down") that count
// toward its host: only those of a request with no enclosing flow, since a
// flow's close record already counts every byte of its connection.
func httpOwnBytes(dir string) string {
	return `CASE WHEN coalesce(json_extract(raw, '$.http.flow_id'), '') = '' THEN json_extract(raw, '$.http.bytes_` + dir + `') END`
}

// TopDestinations ranks hosts by how many matching records name them,
// counting each byte once (see Tally).
func (s *Store) TopDestinations(ctx context.Context, q Query, n int) ([]TopRow, error) {
	where, args := sqlWhere(&q)
	where = andCond(where, "host != ''")
	return s.top(ctx, `SELECT host, '', max(category), count(*),
		sum(verdict = 'deny' OR would_deny), count(DISTINCT sandbox),
		coalesce(sum(json_extract(raw, '$.flow.bytes_up')), 0) + coalesce(sum(`+httpOwnBytes("up")+`), 0),
		coalesce(sum(json_extract(raw, '$.flow.bytes_down')), 0) + coalesce(sum(`+httpOwnBytes("down")+`), 0)
		FROM events`+where+` GROUP BY host ORDER BY count(*) DESC, host LIMIT ?`, append(args, n)...)
}

// TopDenials ranks denied (or would-be denied) destinations with the rule
// that denied them.
func (s *Store) TopDenials(ctx context.Context, q Query, n int) ([]TopRow, error) {
	where, args := sqlWhere(&q)
	where = andCond(where, "(verdict = 'deny' OR would_deny)")
	return s.top(ctx, `SELECT host, `+ruleExpr+` AS rule, max(category), count(*), count(*), count(DISTINCT sandbox), 0, 0
		FROM events`+where+` GROUP BY host, rule ORDER BY count(*) DESC, host LIMIT ?`, append(args, n)...)
}

func andCond(where, cond string) string {
	if where == "" {
		return " WHERE " + cond
	}
	return where + " AND " + cond
}

func (s *Store) top(ctx context.Context, sqlq string, args ...any) ([]TopRow, error) {
	rows, err := s.db.QueryContext(ctx, sqlq, args...)
	if err != nil {
		return nil, fmt.Errorf("audit: top: %w", err)
	}
	defer rows.Close()
	var out []TopRow
	for rows.Next() {
		var r TopRow
		if err := rows.Scan(&r.Host, &r.Rule, &r.Category, &r.Count, &r.Denied, &r.Sandboxes, &r.BytesUp, &r.BytesDown); err != nil {
			return nil, fmt.Errorf("audit: top: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
