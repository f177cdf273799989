package audit

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"sort"
	"strings"
	"time"
)

// TimelineBins is how many time slices the sandbox's life is cut into.
const TimelineBins = 60

// Timeline is the allowed and denied decisions of each category over the
// sandbox's life, in TimelineBins equal slices from Start to End.
type Timeline struct {
	Start, End time.Time
	Rows       []TimelineRow
}

// TimelineRow is one category's decisions per slice.
type TimelineRow struct {
	Category        string
	Allowed, Denied []int
}

type timedDecision struct {
	at     time.Time
	cat    string
	denied bool
}

type timelineBuilder struct{ ds []timedDecision }

// add records a decision: a DNS query, a connection's decision, a
// request, a kernel drop, a reflected secret (not a close record).
func (t *timelineBuilder) add(e *Event) {
	if e.Verdict == "" || e.Flow != nil && e.Flow.Stage == "close" {
		return
	}
	cat := e.Category
	switch {
	case e.Drop != nil:
		cat = "kernel"
	case cat == "":
		cat = "(no category)"
	}
	t.ds = append(t.ds, timedDecision{e.Time, cat, e.Verdict == "deny" || e.WouldDeny})
}

func (t *timelineBuilder) build(start, end time.Time) Timeline {
	tl := Timeline{Start: start, End: end}
	if len(t.ds) == 0 {
		return tl
	}
	span := end.Sub(start)
	rows := map[string]*TimelineRow{}
	for _, d := range t.ds {
		r := rows[d.cat]
		if r == nil {
			r = &TimelineRow{Category: d.cat, Allowed: make([]int, TimelineBins), Denied: make([]int, TimelineBins)}
			rows[d.cat] = r
		}
		i := 0
		if span > 0 {
			i = int(float64(d.at.Sub(start)) / float64(span) * TimelineBins)
		}
		i = min(max(i, 0), TimelineBins-1)
		if d.denied {
			r.Denied[i]++
		} else {
			r.Allowed[i]++
		}
	}
	for _, r := range rows {
		tl.Rows = append(tl.Rows, *r)
	}
	sort.Slice(tl.Rows, func(i, j int) bool { return tl.Rows[i].Category < tl.Rows[j].Category })
	return tl
}

// SVG geometry of the timeline plot.
const (
	tlWidth   = 1100
	tlLabel   = 150 // the category label column
	tlRowH    = 36
	tlAxisH   = 22
	tlBarHalf = 15 // the tallest bar's height on each side of a row's baseline
)

// SVG draws the timeline as an inline SVG (no scripts, no external
// references): one row per category, allowed decisions as green bars
// above its baseline, denied below in red, heights by the square root
// of the count so one burst does not flatten the rest.
func (t Timeline) SVG() template.HTML {
	if len(t.Rows) == 0 {
		return ""
	}
	h := len(t.Rows)*tlRowH + tlAxisH
	peak := 1
	for _, r := range t.Rows {
		for i := range r.Allowed {
			peak = max(peak, r.Allowed[i], r.Denied[i])
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="timeline-plot" viewBox="0 0 %d %d" width="100%%" role="img" aria-label="allowed and denied decisions per category over the sandbox's life">`, tlWidth, h)
	b.WriteString(`<title>Decisions per category over time: allowed above each line, denied below</title>`)
	for i, r := range t.Rows {
		t.row(&b, i, r, peak)
	}
	t.axis(&b, len(t.Rows)*tlRowH)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func (t Timeline) row(b *strings.Builder, i int, r TimelineRow, peak int) {
	y := i*tlRowH + tlRowH/2
	plot := float64(tlWidth - tlLabel)
	w := plot / TimelineBins
	fmt.Fprintf(b, `<g class="tl-row" data-category="%s">`, html.EscapeString(r.Category))
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12" text-anchor="end" dominant-baseline="middle" fill="#374151">%s</text>`,
		tlLabel-8, y, html.EscapeString(clip(r.Category, 20)))
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#d1d5db"/>`, tlLabel, y, tlWidth, y)
	for k := range r.Allowed {
		x := float64(tlLabel) + float64(k)*w
		for _, bar := range []struct {
			n    int
			cls  string
			fill string
			up   bool
		}{{r.Allowed[k], "tl-allow", "#16a34a", true}, {r.Denied[k], "tl-deny", "#dc2626", false}} {
			if bar.n == 0 {
				continue
			}
			bh := math.Max(2, tlBarHalf*math.Sqrt(float64(bar.n)/float64(peak)))
			top := float64(y)
			if bar.up {
				top -= bh
			}
			verb := "allowed"
			if !bar.up {
				verb = "denied"
			}
			fmt.Fprintf(b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %d %s from %s</title></rect>`,
				bar.cls, x+0.5, top, math.Max(1, w-1), bh, bar.fill, html.EscapeString(r.Category), bar.n, verb, t.binStart(k).UTC().Format("15:04:05"))
		}
	}
	b.WriteString(`</g>`)
}

func (t Timeline) axis(b *strings.Builder, y int) {
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#9ca3af"/>`, tlLabel, y, tlWidth, y)
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		x := float64(tlLabel) + f*float64(tlWidth-tlLabel)
		anchor := "middle"
		switch f {
		case 0:
			anchor = "start"
		case 1:
			anchor = "end"
		}
		at := t.Start.Add(time.Duration(f * float64(t.End.Sub(t.Start))))
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="11" text-anchor="%s" fill="#6b7280">%s</text>`, x, y+15, anchor, at.UTC().Format("15:04:05"))
	}
}

func (t Timeline) binStart(k int) time.Time {
	return t.Start.Add(time.Duration(float64(t.End.Sub(t.Start)) * float64(k) / TimelineBins))
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
