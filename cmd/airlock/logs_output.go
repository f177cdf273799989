//go:build !airlock_thin

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"airlock/audit"
)

// logFormats are the values of `logs -o`.
var logFormats = []string{"table", "compact", "json", "jsonl"}

// eventPrinter prints events in one format. A table's column widths come
// from the first rows and grow when a later row needs it; json collects
// the events and writes one array at the end.
type eventPrinter struct {
	w       io.Writer
	format  string
	enc     *json.Encoder
	widths  []int
	headers bool
	n       int
	all     []audit.Event
	rows    [][]string // table rows not yet written (see flush)
}

var tableHeader = []string{"TIME", "SANDBOX", "KIND", "VERDICT", "CATEGORY", "RULE", "DETAIL"}

func newEventPrinter(w io.Writer, format string) (*eventPrinter, error) {
	for _, f := range logFormats {
		if f == format {
			return &eventPrinter{w: w, format: format, enc: json.NewEncoder(w)}, nil
		}
	}
	return nil, usagef("-o %q: want one of %s", format, strings.Join(logFormats, ", "))
}

func (p *eventPrinter) print(evs ...audit.Event) error {
	p.n += len(evs)
	switch p.format {
	case "jsonl":
		for i := range evs {
			if err := p.enc.Encode(&evs[i]); err != nil {
				return err
			}
		}
		return nil
	case "json":
		p.all = append(p.all, evs...)
		return nil
	case "compact":
		var b strings.Builder
		for i := range evs {
			b.WriteString(compactLine(&evs[i]))
			b.WriteByte('\n')
		}
		_, err := io.WriteString(p.w, b.String())
		return err
	}
	if !p.headers {
		p.rows = append(p.rows, tableHeader)
		p.headers = true
	}
	for i := range evs {
		p.rows = append(p.rows, eventRow(&evs[i]))
	}
	return nil
}

// flush writes the table rows printed since the last flush, aligned
// together (a table is sized by the rows it has seen so far).
func (p *eventPrinter) flush() error {
	if len(p.rows) == 0 {
		return nil
	}
	rows := p.rows
	p.rows = nil
	return writeTable(p.w, rows, &p.widths)
}

// finish ends the output: the json array, and a note on stderr (errw)
// when nothing matched, so that an empty table is not mistaken for one
// cut short.
func (p *eventPrinter) finish(errw io.Writer) error {
	if err := p.flush(); err != nil {
		return err
	}
	if p.format == "json" {
		enc := json.NewEncoder(p.w)
		enc.SetIndent("", "  ")
		if p.all == nil {
			p.all = []audit.Event{}
		}
		return enc.Encode(p.all)
	}
	if p.n == 0 && errw != nil {
		fmt.Fprintln(errw, "airlock: no events match")
	}
	return nil
}

func eventRow(e *audit.Event) []string {
	return []string{e.Time.UTC().Format("2006-01-02T15:04:05.000Z"), dash(escapeCell(e.Sandbox)), string(e.Kind),
		dash(verdictText(e)), dash(escapeCell(e.Category)), dash(escapeCell(shortRule(e.Rule))), escapeCell(audit.Summary(e))}
}

// compactLine is one event on one line, whatever its fields hold:
//
//	TIME SANDBOX KIND VERDICT [CATEGORY] RULE: DETAIL
func compactLine(e *audit.Event) string {
	var b strings.Builder
	b.WriteString(e.Time.UTC().Format("2006-01-02T15:04:05.000Z"))
	for _, s := range []string{dash(e.Sandbox), string(e.Kind), dash(strings.ReplaceAll(verdictText(e), " ", "-"))} {
		b.WriteByte(' ')
		b.WriteString(escapeCell(s))
	}
	if e.Category != "" {
		b.WriteString(" [" + escapeCell(e.Category) + "]")
	}
	if e.Rule != "" {
		b.WriteString(" " + escapeCell(shortRule(e.Rule)))
	}
	b.WriteString(": ")
	b.WriteString(escapeCell(audit.Summary(e)))
	return b.String()
}

func verdictText(e *audit.Event) string {
	if e.WouldDeny {
		return e.Verdict + " (would deny)"
	}
	return e.Verdict
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortRule shows a rule's position by file name, not by its full path:
// "name (/tmp/x/policies/p.toml:3:1)" becomes "name (p.toml:3:1)". The
// json outputs keep the full path.
func shortRule(rule string) string {
	name, pos, ok := strings.Cut(rule, " (")
	if !ok || !strings.HasSuffix(pos, ")") {
		return rule
	}
	return name + " (" + filepath.Base(strings.TrimSuffix(pos, ")")) + ")"
}

// escapeCell makes s safe for one line of a terminal: control characters
// (newlines, tabs, ESC), Unicode format characters (bidi overrides) and
// invalid UTF-8 become Go escapes, and a backslash is doubled so the
// escapes stay unambiguous.
func escapeCell(s string) string {
	clean := true
	for _, r := range s {
		if r == '\\' || r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// writeTable prints rows with columns padded to *widths, which it grows to
// fit; the last column is never padded.
func writeTable(w io.Writer, rows [][]string, widths *[]int) error {
	for _, r := range rows {
		for i, c := range r {
			if i >= len(*widths) {
				*widths = append(*widths, 0)
			}
			(*widths)[i] = max((*widths)[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r {
			if i == len(r)-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", (*widths)[i]-utf8.RuneCountInString(c)+2))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
