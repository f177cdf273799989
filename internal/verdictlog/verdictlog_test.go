package verdictlog

import (
	"log/slog"
	"testing"

	"airlock/policies"
)

func TestLevel(t *testing.T) {
	for _, tc := range []struct {
		verdict   string
		wouldDeny bool
		want      slog.Level
	}{
		{"deny", false, slog.LevelWarn}, {"ask", false, slog.LevelWarn}, {"bogus", false, slog.LevelWarn},
		{"audit", false, slog.LevelInfo}, {"allow", true, slog.LevelInfo}, {"allow", false, slog.LevelDebug},
	} {
		if got := LevelOf(tc.verdict, tc.wouldDeny); got != tc.want {
			t.Errorf("LevelOf(%q, %v) = %v, want %v", tc.verdict, tc.wouldDeny, got, tc.want)
		}
	}
	if Level(policies.ActionDeny, false) != slog.LevelWarn || Level(policies.ActionAllow, false) != slog.LevelDebug {
		t.Error("Level disagrees with LevelOf")
	}
}

func TestJoinReason(t *testing.T) {
	for _, tc := range [][3]string{{"a", "b", "a; b"}, {"", "b", "b"}, {"a", "", "a"}, {"", "", ""}} {
		if got := JoinReason(tc[0], tc[1]); got != tc[2] {
			t.Errorf("JoinReason(%q, %q) = %q, want %q", tc[0], tc[1], got, tc[2])
		}
	}
}
