package main

import (
	"sync"

	"airlock/internal/agentwire"
)

// span is when a forgotten command ran, kept for attribution.
type span struct {
	id         string
	start, end int64 // unix ns
}

// history holds the last forgotten commands: a query made just before its
// command ended may be asked about after the host stored the command.
type history struct {
	mu    sync.Mutex
	spans []span
}

const maxHistory = 256

func (h *history) add(s span) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.spans) == maxHistory {
		h.spans = append(h.spans[:0], h.spans[1:]...)
	}
	h.spans = append(h.spans, s)
}

func (h *history) covering(at int64, ids map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.spans {
		if s.start <= at && at <= s.end {
			ids[s.id] = true
		}
	}
}

// spanOf is when a command ran (end 0: still running).
func spanOf(info agentwire.Proc) span {
	s := span{id: info.ID, start: info.StartedNS}
	if !info.Running && info.Exit != nil {
		s.end = info.Exit.FinishedNS
	}
	return s
}

// onlyCommandAt names the one command that ran at at (unix ns), or ""
// when none or several did. Every process of the sandbox but PID 1 and
// its supervisors descends from a command (their shims are subreapers),
// so a socket gone by the time it is asked about was one of theirs.
func (a *agent) onlyCommandAt(at int64) string {
	if at <= 0 {
		return ""
	}
	ids := map[string]bool{}
	for _, info := range a.ps() {
		s := spanOf(info)
		if s.start <= at && (s.end == 0 || at <= s.end) {
			ids[info.ID] = true
		}
	}
	a.hist.covering(at, ids)
	if len(ids) != 1 {
		return ""
	}
	for id := range ids {
		return id
	}
	return ""
}
