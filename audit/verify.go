package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// VerifyResult is what Verify found in a set of JSONL files.
type VerifyResult struct {
	Files     int
	Records   int
	FirstSeq  uint64
	LastSeq   uint64
	FinalHash string    // hash of the last record (compare with a lifecycle anchor)
	Problems  []Problem // breaks in the chain; empty means intact
	Notes     []string  // facts worth knowing that are not breaks (gap events, chain start)

	otherMapping int    // OCSF lines of a mapping version this build does not know
	otherFirst   string // the first of them, FILE:LINE
	// refused are the seqs the stream refused for good, each with the
	// audit_error record that says so: not deletions, if absent.
	refused map[uint64]string
}

// OK reports whether the chain is intact.
func (r *VerifyResult) OK() bool { return len(r.Problems) == 0 }

// Problem is one break in the chain, located by file and line.
type Problem struct {
	File string
	Line int
	Seq  uint64
	Kind string // invalid | modified | deleted | reordered | duplicated
	Msg  string
}

func (p Problem) String() string {
	if p.File == "" {
		return fmt.Sprintf("%s: %s", p.Kind, p.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Kind, p.Msg)
}

// pos is one record as Verify sees it.
type pos struct {
	file    string
	line    int
	seq     uint64
	prev    string
	hash    string
	sandbox string
	end     *EndAnchor // set on a sandbox's end record
}

// Verify checks the hash chain across JSONL files, in any order (rotated
// files are ordered by their first sequence number). It reports every
// edited, deleted, reordered or duplicated record it can locate, and
// checks the chain against the end record of every sandbox the files
// hold (VerifyAnchored). A cut tail that took the end records with it
// cannot be seen from the files alone: give the store's end records to
// VerifyAnchored.
func Verify(paths ...string) (*VerifyResult, error) { return VerifyAnchored(nil, paths...) }

// EndAnchor is a sandbox's end record (lifecycle destroyed or failed):
// its own seq, and the range and final hash of the sandbox's records
// before it, as the pipeline wrote them.
type EndAnchor struct {
	Sandbox   string
	Seq       uint64 // the end record's seq
	FirstSeq  uint64
	LastSeq   uint64
	FinalHash string
	Where     string // where it was read: "store" or file:line
}

// VerifyAnchored is Verify that also holds the chain to anchors, end
// records from elsewhere (the store): a chain that ends before an
// anchor's records, or before the anchor itself, has lost its tail
// ("truncated"); a record whose hash is not the anchor's final hash was
// edited ("modified").
func VerifyAnchored(anchors []EndAnchor, paths ...string) (*VerifyResult, error) {
	res := &VerifyResult{Files: len(paths)}
	var files [][]pos
	for _, p := range paths {
		recs, err := readChain(p, res)
		if err != nil {
			return nil, err
		}
		files = append(files, recs)
	}
	sort.SliceStable(files, func(i, j int) bool { return firstSeq(files[i]) < firstSeq(files[j]) })
	var all []pos
	for _, f := range files {
		all = append(all, f...)
	}
	checkChain(all, res)
	checkAnchors(all, append(fileAnchors(all), anchors...), res)
	if res.otherMapping > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d OCSF lines (the first at %s) are of another mapping version: their chained records are checked, their OCSF fields are not",
			res.otherMapping, res.otherFirst))
	}
	return res, nil
}

func firstSeq(recs []pos) uint64 {
	if len(recs) == 0 {
		return ^uint64(0)
	}
	return recs[0].seq
}

// readChain reads one file's records; a gzip-compressed file (a log
// rotator's events.jsonl.2.gz) is read decompressed, since the chain
// hashes the lines, not the file.
func readChain(path string, res *VerifyResult) ([]pos, error) {
	br, closeFn, err := openJSONL(path, os.Stdin)
	if err != nil {
		return nil, fmt.Errorf("audit: verify: %w", err)
	}
	defer closeFn()
	var out []pos
	for n := 1; ; n++ {
		raw, err := readLine(br)
		if len(raw) == 0 && err == io.EOF {
			return out, nil
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("audit: verify %s:%d: %w", path, n, err)
		}
		p, ok := parsePos(raw, path, n, res)
		if ok {
			out = append(out, p)
		}
	}
}

func parsePos(raw []byte, path string, n int, res *VerifyResult) (pos, bool) {
	var h struct {
		Seq       uint64      `json:"seq"`
		PrevHash  string      `json:"prev_hash"`
		Kind      Kind        `json:"kind"`
		Sandbox   string      `json:"sandbox"`
		Gap       *Gap        `json:"gap"`
		Lifecycle *Lifecycle  `json:"lifecycle"`
		AuditErr  *AuditError `json:"audit_error"`
	}
	line := raw
	raw, cerr := chainedRecord(raw)
	if cerr != nil {
		res.Problems = append(res.Problems, Problem{File: path, Line: n, Kind: "invalid", Msg: cerr.Error()})
		return pos{}, false
	}
	if err := json.Unmarshal(raw, &h); err != nil || h.Seq == 0 {
		res.Problems = append(res.Problems, Problem{File: path, Line: n, Kind: "invalid",
			Msg: "not a chained audit record (unparseable JSON or no seq)"})
		return pos{}, false
	}
	if h.Kind == KindGap && h.Gap != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("%s:%d: gap event at seq %d: the pipeline dropped %d events between %s and %s",
			path, n, h.Seq, h.Gap.Dropped, h.Gap.From.Format(timeFmt), h.Gap.To.Format(timeFmt)))
	}
	if h.Kind == KindAuditError && h.AuditErr != nil {
		noteAuditError(h.AuditErr, fmt.Sprintf("%s:%d: audit_error at seq %d", path, n, h.Seq), res)
	}
	if len(raw) != len(line) {
		checkOCSF(line, raw, path, n, h.Seq, res)
	}
	sum := sha256.Sum256(raw)
	p := pos{file: path, line: n, seq: h.Seq, prev: h.PrevHash, hash: hex.EncodeToString(sum[:]), sandbox: h.Sandbox}
	if l := h.Lifecycle; h.Kind == KindLifecycle && l != nil && l.FinalHash != "" && (l.Stage == "destroyed" || l.Stage == "failed") {
		p.end = &EndAnchor{Sandbox: h.Sandbox, Seq: h.Seq, FirstSeq: l.FirstSeq, LastSeq: l.LastSeq,
			FinalHash: l.FinalHash, Where: fmt.Sprintf("%s:%d", path, n)}
	}
	return p, true
}

// noteAuditError explains an audit_error record: a record the store
// refused is in the stream, so only noted; one the stream refused is
// missing from it, and checkMissing reports that seq as refused (with
// where the record went), not deleted.
func noteAuditError(a *AuditError, at string, res *VerifyResult) {
	kept := "the record is in " + a.DeadLetter
	if a.DeadLetter == "" {
		kept = "the dead-letter file could not be written: the appliance's log has it"
	}
	switch {
	case a.Sink == "stream" && a.Seq != 0:
		if res.refused == nil {
			res.refused = map[uint64]string{}
		}
		res.refused[a.Seq] = fmt.Sprintf("%s: the stream refused seq %d (%s) for good, so it is not in these files; %s",
			at, a.Seq, a.Reason, kept)
	case a.Seq != 0:
		res.Notes = append(res.Notes, fmt.Sprintf("%s: the %s refused seq %d (%s) for good; it is in these files, and %s",
			at, a.Sink, a.Seq, a.Reason, kept))
	default:
		res.Notes = append(res.Notes, fmt.Sprintf("%s: a %s event could not be encoded (%s) and never got a seq; %s",
			at, a.RecordKind, a.Error, kept))
	}
}

const timeFmt = "2006-01-02T15:04:05.000Z07:00"

func checkChain(all []pos, res *VerifyResult) {
	res.Records = len(all)
	if len(all) == 0 {
		return
	}
	bySeq := make(map[uint64]pos, len(all))
	minSeq, maxSeq := all[0].seq, all[0].seq
	for i, p := range all {
		if q, dup := bySeq[p.seq]; dup {
			res.Problems = append(res.Problems, problem(p, "duplicated",
				fmt.Sprintf("seq %d already appears at %s:%d", p.seq, q.file, q.line)))
		} else {
			bySeq[p.seq] = p
		}
		if i > 0 && p.seq < all[i-1].seq {
			q := all[i-1]
			res.Problems = append(res.Problems, problem(p, "reordered",
				fmt.Sprintf("seq %d comes after seq %d (%s:%d)", p.seq, q.seq, q.file, q.line)))
		}
		minSeq, maxSeq = min(minSeq, p.seq), max(maxSeq, p.seq)
	}
	checkMissing(all, bySeq, minSeq, maxSeq, res)
	checkLinks(all, bySeq, res)
	first, last := bySeq[minSeq], bySeq[maxSeq]
	res.FirstSeq, res.LastSeq, res.FinalHash = minSeq, maxSeq, last.hash
	if minSeq != 1 || first.prev != "" {
		res.Notes = append(res.Notes, fmt.Sprintf("the chain starts at seq %d (%s:%d); earlier records are not among these files",
			minSeq, first.file, first.line))
	}
}

// checkMissing reports each run of absent sequence numbers once.
func checkMissing(all []pos, bySeq map[uint64]pos, minSeq, maxSeq uint64, res *VerifyResult) {
	if maxSeq-minSeq+1 == uint64(len(bySeq)) {
		return
	}
	seqs := make([]uint64, 0, len(bySeq))
	for s := range bySeq {
		seqs = append(seqs, s)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	refused := make([]uint64, 0, len(res.refused))
	for s := range res.refused {
		refused = append(refused, s)
	}
	sort.Slice(refused, func(i, j int) bool { return refused[i] < refused[j] })
	for i := 1; i < len(seqs); i++ {
		if seqs[i] == seqs[i-1]+1 {
			continue
		}
		after := bySeq[seqs[i]]
		a, b := seqs[i-1]+1, seqs[i]-1
		for _, r := range refused {
			if r < a || r > b {
				continue
			}
			res.Notes = append(res.Notes, res.refused[r])
			if r > a {
				reportMissing(a, r-1, after, res)
			}
			a = r + 1
		}
		if a <= b {
			reportMissing(a, b, after, res)
		}
	}
}

func reportMissing(a, b uint64, after pos, res *VerifyResult) {
	what := fmt.Sprintf("seq %d is missing", a)
	if b > a {
		what = fmt.Sprintf("seq %d..%d (%d records) are missing", a, b, b-a+1)
	}
	res.Problems = append(res.Problems, problem(after, "deleted",
		fmt.Sprintf("%s before seq %d", what, after.seq)))
}

// checkLinks compares every record's prev_hash with its predecessor's hash.
func checkLinks(all []pos, bySeq map[uint64]pos, res *VerifyResult) {
	for _, p := range all {
		q, ok := bySeq[p.seq-1]
		if !ok || p.prev == q.hash || bySeq[p.seq].line != p.line || bySeq[p.seq].file != p.file {
			continue
		}
		res.Problems = append(res.Problems, problem(q, "modified",
			fmt.Sprintf("record seq %d does not hash to the prev_hash stored in seq %d (%s:%d): one of the two lines was edited",
				q.seq, p.seq, p.file, p.line)))
	}
}

func problem(p pos, kind, msg string) Problem {
	return Problem{File: p.file, Line: p.line, Seq: p.seq, Kind: kind, Msg: msg}
}

// fileAnchors are the end records among the files' records.
func fileAnchors(all []pos) []EndAnchor {
	var out []EndAnchor
	for _, p := range all {
		if p.end != nil {
			out = append(out, *p.end)
		}
	}
	return out
}

// checkAnchors holds the chain to each sandbox's end record (each once,
// by its seq), and notes the sandboxes whose end record is absent.
func checkAnchors(all []pos, anchors []EndAnchor, res *VerifyResult) {
	if len(all) == 0 {
		for _, a := range anchors {
			res.Problems = append(res.Problems, Problem{Kind: "truncated", Seq: a.Seq,
				Msg: fmt.Sprintf("no records, but sandbox %s's end record (seq %d, %s) says its records run to seq %d", a.Sandbox, a.Seq, a.Where, a.LastSeq)})
		}
		return
	}
	bySeq := make(map[uint64]pos, len(all))
	for _, p := range all {
		if _, dup := bySeq[p.seq]; !dup {
			bySeq[p.seq] = p
		}
	}
	last := bySeq[res.LastSeq]
	seen := map[uint64]bool{}
	ended := map[string]bool{}
	for _, a := range anchors {
		if seen[a.Seq] {
			continue
		}
		seen[a.Seq] = true
		ended[a.Sandbox] = true
		checkAnchor(a, bySeq, last, res)
	}
	noteUnended(all, ended, res)
}

func checkAnchor(a EndAnchor, bySeq map[uint64]pos, last pos, res *VerifyResult) {
	who := fmt.Sprintf("sandbox %s's end record (seq %d, %s)", a.Sandbox, a.Seq, a.Where)
	switch {
	case a.LastSeq > last.seq:
		res.Problems = append(res.Problems, problem(last, "truncated",
			fmt.Sprintf("the chain ends at seq %d, but %s says its records run to seq %d: the tail after seq %d is missing",
				last.seq, who, a.LastSeq, last.seq)))
	case a.Seq > last.seq:
		res.Problems = append(res.Problems, problem(last, "truncated",
			fmt.Sprintf("the chain ends at seq %d, before %s: the tail after seq %d is missing", last.seq, who, last.seq)))
	}
	if p, ok := bySeq[a.LastSeq]; ok && a.LastSeq > 0 && p.hash != a.FinalHash {
		res.Problems = append(res.Problems, problem(p, "modified",
			fmt.Sprintf("record seq %d does not hash to the final_hash in %s", p.seq, who)))
	}
}

// noteUnended notes each sandbox with records here but no end record:
// still running, or its end was cut off with the tail.
func noteUnended(all []pos, ended map[string]bool, res *VerifyResult) {
	lastOf := map[string]pos{}
	var order []string
	for _, p := range all {
		if p.sandbox == "" || ended[p.sandbox] {
			continue
		}
		if _, ok := lastOf[p.sandbox]; !ok {
			order = append(order, p.sandbox)
		}
		lastOf[p.sandbox] = p
	}
	if len(order) == 0 {
		return
	}
	var each []string
	for _, sb := range order {
		p := lastOf[sb]
		each = append(each, fmt.Sprintf("%s after seq %d (%s:%d)", sb, p.seq, p.file, p.line))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("no end record here for %s: still running, or the tail was cut (check with the store's end records: --state-dir)",
		strings.Join(each, ", ")))
}

// EndAnchors reads every sandbox end record in the store, to hold JSONL
// files to with VerifyAnchored.
func (s *Store) EndAnchors(ctx context.Context) ([]EndAnchor, error) {
	var out []EndAnchor
	err := s.Each(ctx, Query{Kind: KindLifecycle}, func(e Event) error {
		if l := e.Lifecycle; endsSandbox(&e) && l.FinalHash != "" {
			out = append(out, EndAnchor{Sandbox: e.Sandbox, Seq: e.Seq, FirstSeq: l.FirstSeq, LastSeq: l.LastSeq,
				FinalHash: l.FinalHash, Where: "store"})
		}
		return nil
	})
	return out, err
}

// checkOCSF holds an OCSF line's mapped fields to the record it carries.
func checkOCSF(line, rec []byte, path string, n int, seq uint64, res *VerifyResult) {
	ok, known := ocsfDerived(line, rec)
	switch {
	case !known:
		if res.otherMapping == 0 {
			res.otherFirst = fmt.Sprintf("%s:%d", path, n)
		}
		res.otherMapping++
	case !ok:
		res.Problems = append(res.Problems, Problem{File: path, Line: n, Seq: seq, Kind: "modified",
			Msg: "the OCSF fields of this line are not those of the Airlock record it carries (unmapped.airlock): they were edited"})
	}
}
