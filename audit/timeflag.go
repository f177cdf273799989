package audit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseTime reads a --since/--until value: a duration before now ("24h",
// "90m", "7d"), an RFC 3339 timestamp ("2026-11-30T08:00:00Z", fractional
// seconds allowed), or a UTC date ("2026-11-30").
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= 100000 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("time %q: a duration counts back from now and must not be negative", s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q: want a duration (24h, 90m, 7d), an RFC 3339 timestamp or a date (2026-11-30)", s)
}
