package audit

import (
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"24h", now.Add(-24 * time.Hour), false},
		{"90m", now.Add(-90 * time.Minute), false},
		{"7d", now.Add(-7 * 24 * time.Hour), false},
		{"2026-11-30T08:00:00Z", time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC), false},
		{"2026-11-30T08:00:00.5+01:00", time.Date(2026, 11, 30, 7, 0, 0, 5e8, time.UTC), false},
		{"2026-11-29", time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), false},
		{"", time.Time{}, false},
		{"-1h", time.Time{}, true},
		{"yesterday", time.Time{}, true},
		{"2026-13-01", time.Time{}, true},
	}
	for _, tc := range cases {
		got, err := ParseTime(tc.in, now)
		if (err != nil) != tc.err || !got.Equal(tc.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}
