package audit

import (
	"sort"
	"strings"
)

// Tally ranks destinations and denials from events of any source (the
// store, JSONL files, the control API), as TopDestinations and TopDenials
// do in the store. Bytes are counted once: a flow's close record carries
// every byte of the connection, HTTP bodies included, so an http record's
// bytes count only when it names no enclosing flow.
type Tally struct {
	dest map[string]*tallyRow
	den  map[[2]string]*tallyRow
}

type tallyRow struct {
	TopRow
	sandboxes map[string]bool
}

// NewTally returns an empty tally.
func NewTally() *Tally {
	return &Tally{dest: map[string]*tallyRow{}, den: map[[2]string]*tallyRow{}}
}

// Add counts one event.
func (t *Tally) Add(e *Event) {
	host := strings.ToLower(Host(e))
	if host == "" {
		return
	}
	denied := e.Verdict == "deny" || e.WouldDeny
	d := t.dest[host]
	if d == nil {
		d = &tallyRow{TopRow: TopRow{Host: host}, sandboxes: map[string]bool{}}
		t.dest[host] = d
	}
	d.add(e, denied)
	if e.Category > d.Category {
		d.Category = e.Category
	}
	up, down := countedBytes(e)
	d.BytesUp += up
	d.BytesDown += down
	if !denied {
		return
	}
	k := [2]string{host, e.Rule}
	r := t.den[k]
	if r == nil {
		r = &tallyRow{TopRow: TopRow{Host: host, Rule: e.Rule}, sandboxes: map[string]bool{}}
		t.den[k] = r
	}
	r.add(e, true)
	if e.Category > r.Category {
		r.Category = e.Category
	}
}

func (r *tallyRow) add(e *Event, denied bool) {
	r.Count++
	if denied {
		r.Denied++
	}
	if e.Sandbox != "" && !r.sandboxes[e.Sandbox] {
		r.sandboxes[e.Sandbox] = true
		r.Sandboxes++
	}
}

// countedBytes is what an event adds to its destination's byte counts.
func countedBytes(e *Event) (up, down int64) {
	switch {
	case e.Flow != nil:
		return e.Flow.BytesUp, e.Flow.BytesDown
	case e.HTTP != nil && e.HTTP.FlowID == "":
		return e.HTTP.BytesUp, e.HTTP.BytesDown
	}
	return 0, 0
}

// Destinations is the top n destinations by event count, then host.
func (t *Tally) Destinations(n int) []TopRow {
	out := make([]TopRow, 0, len(t.dest))
	for _, r := range t.dest {
		out = append(out, r.TopRow)
	}
	return topN(out, n)
}

// Denials is the top n (host, rule) denials by count, then host.
func (t *Tally) Denials(n int) []TopRow {
	out := make([]TopRow, 0, len(t.den))
	for _, r := range t.den {
		out = append(out, r.TopRow)
	}
	return topN(out, n)
}

func topN(rows []TopRow, n int) []TopRow {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Count != rows[j].Count {
			return rows[i].Count > rows[j].Count
		}
		if rows[i].Host != rows[j].Host {
			return rows[i].Host < rows[j].Host
		}
		return rows[i].Rule < rows[j].Rule
	})
	if len(rows) > n {
		rows = rows[:n]
	}
	return rows
}
