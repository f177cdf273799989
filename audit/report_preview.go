package audit

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// PreviewRow is one preview of the sandbox in the review report: who
// exposed which port to whom, how it ended and what went through it.
type PreviewRow struct {
	ID, Name, By string
	Port         int
	Created      time.Time
	End          string // expired | revoked | "" while live
	EndReason    string
	Opened       []string // principals who opened it
	Requests     int
	Refused      int // requests the listener answered itself (deny)
	BytesDown    int64
}

// preview folds a preview or ingress event into its row.
func (b *reportBuilder) preview(e *Event) {
	row := b.previewRow(e.ID)
	if p := e.Preview; p != nil {
		switch p.Stage {
		case "created":
			row.Port, row.Name, row.By, row.Created = p.Port, p.Name, p.By, e.Time
		case "opened":
			row.Opened = appendNew(row.Opened, p.Principal)
		case "expired", "revoked":
			row.End, row.EndReason = p.Stage, e.Reason
		}
		return
	}
	n := max(1, int(e.Ingress.Count))
	row.Requests += n
	if e.Verdict == "deny" {
		row.Refused += n
	}
	row.BytesDown += e.Ingress.BytesDown
}

func (b *reportBuilder) previewRow(id string) *PreviewRow {
	for i := range b.r.Previews {
		if b.r.Previews[i].ID == id {
			return &b.r.Previews[i]
		}
	}
	b.r.Previews = append(b.r.Previews, PreviewRow{ID: id})
	return &b.r.Previews[len(b.r.Previews)-1]
}

func appendNew(xs []string, x string) []string {
	for _, y := range xs {
		if y == x {
			return xs
		}
	}
	xs = append(xs, x)
	sort.Strings(xs)
	return xs
}

// State says how a preview ended, or that it is live.
func (p PreviewRow) State() string {
	if p.End == "" {
		return "live"
	}
	return p.End + ": " + p.EndReason
}

func (m *mdWriter) previews(r *Report) {
	if !m.section(fmt.Sprintf("Previews (%d)", len(r.Previews)), len(r.Previews), "No ports exposed.") {
		return
	}
	var rows [][]string
	for _, p := range r.Previews {
		rows = append(rows, []string{"`" + p.ID + "`", fmt.Sprint(p.Port), p.Name, p.By, strings.Join(p.Opened, ", "),
			fmt.Sprint(p.Requests), fmt.Sprint(p.Refused), humanBytes(p.BytesDown), p.State()})
	}
	m.table([]string{"Preview", "Port", "Name", "Exposed by", "Opened by", "Requests", "Refused", "Sent", "State"}, rows)
}
