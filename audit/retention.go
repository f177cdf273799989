package audit

import (
	"context"
	"fmt"
	"time"
)

// Retention bounds the store. Zero fields mean no bound.
type Retention struct {
	MaxAge   time.Duration // delete records older than this
	MaxBytes int64         // delete the oldest records while the store holds more than this
}

const retentionChunk = 20000

// Prune applies the retention bounds now, deleting the oldest records
// first, and returns how many it deleted. The pipeline calls it while
// running; freed pages go back to the file system.
func (s *Store) Prune(ctx context.Context, r Retention, now time.Time) (int64, error) {
	defer s.markWritten()
	var total int64
	if r.MaxAge > 0 {
		cutoff := now.Add(-r.MaxAge).UnixNano()
		for {
			n, err := s.deleteWhere(ctx, `time < ? AND seq <= (SELECT coalesce(max(last), 0) FROM spans WHERE min_time < ?)`, cutoff)
			total += n
			if err != nil || n < retentionChunk {
				if err != nil {
					return total, err
				}
				break
			}
		}
	}
	if r.MaxBytes > 0 {
		n, err := s.pruneSize(ctx, r.MaxBytes)
		total += n
		if err != nil {
			return total, err
		}
	}
	if total > 0 {
		// Spans wholly before the oldest record left are of no more use.
		if _, err := s.w.ExecContext(ctx, `DELETE FROM spans WHERE last < (SELECT min(seq) FROM events)`); err != nil {
			return total, fmt.Errorf("audit: retention spans: %w", err)
		}
		if _, err := s.w.ExecContext(ctx, `PRAGMA incremental_vacuum`); err != nil {
			return total, fmt.Errorf("audit: retention vacuum: %w", err)
		}
	}
	return total, nil
}

func (s *Store) pruneSize(ctx context.Context, maxBytes int64) (int64, error) {
	var total int64
	for range 1000 {
		size, err := s.Size(ctx)
		if err != nil || size <= maxBytes {
			return total, err
		}
		var count int64
		if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM events`).Scan(&count); err != nil {
			return total, fmt.Errorf("audit: retention: %w", err)
		}
		if count == 0 {
			return total, nil
		}
		// Delete a share of the oldest rows in proportion to the excess.
		share := int64(float64(count) * float64(size-maxBytes) / float64(size))
		share = min(max(share+1, count/20, 1), count)
		n, err := s.deleteOldest(ctx, share)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (s *Store) deleteWhere(ctx context.Context, cond string, arg int64) (int64, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE `+cond+
		` ORDER BY seq LIMIT `+fmt.Sprint(retentionChunk)+`)`, arg, arg)
	if err != nil {
		return 0, fmt.Errorf("audit: retention delete: %w", err)
	}
	return res.RowsAffected()
}

func (s *Store) deleteOldest(ctx context.Context, n int64) (int64, error) {
	res, err := s.w.ExecContext(ctx, `DELETE FROM events WHERE seq IN (SELECT seq FROM events ORDER BY seq LIMIT ?)`, n)
	if err != nil {
		return 0, fmt.Errorf("audit: retention delete: %w", err)
	}
	return res.RowsAffected()
}
