// Package verdictlog is how proxy and dnsd log a decision: the level a
// verdict is logged at, and how a verdict's reason is extended. One home,
// so that a refusal is logged alike by both.
package verdictlog

import (
	"log/slog"

	"airlock/policies"
)

// Level is the log level of a decision: a refusal (or a hold not yet
// approved) warns, an allow that would deny in enforce mode or an audited
// one informs, a plain allow is debug.
func Level(a policies.Action, wouldDeny bool) slog.Level {
	switch {
	case !a.Allows():
		return slog.LevelWarn
	case wouldDeny || a == policies.ActionAudit:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// LevelOf is Level for a verdict by its name, as events carry it ("deny",
// "allow", "audit", "ask"); an unknown name counts as a refusal.
func LevelOf(verdict string, wouldDeny bool) slog.Level {
	for _, a := range []policies.Action{policies.ActionAllow, policies.ActionAudit, policies.ActionAsk} {
		if verdict == a.String() {
			return Level(a, wouldDeny)
		}
	}
	return Level(policies.ActionDeny, wouldDeny)
}

// JoinReason appends extra to a verdict's reason, "; " between them.
func JoinReason(reason, extra string) string {
	switch {
	case extra == "":
		return reason
	case reason == "":
		return extra
	}
	return reason + "; " + extra
}
