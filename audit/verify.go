package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
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
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Kind, p.Msg)
}

// pos is one record as Verify sees it.
type pos struct {
	file string
	line int
	seq  uint64
	prev string
	hash string
}

// Verify checks the hash chain across JSONL files, in any order (rotated
// files are ordered by their first sequence number). It reports every
// edited, deleted, reordered or duplicated record it can locate. The last
// record of the chain cannot be checked against a successor: compare
// FinalHash with the anchor in the store or a lifecycle event.
func Verify(paths ...string) (*VerifyResult, error) {
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
	return res, nil
}

func firstSeq(recs []pos) uint64 {
	if len(recs) == 0 {
		return ^uint64(0)
	}
	return recs[0].seq
}

func readChain(path string, res *VerifyResult) ([]pos, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit: verify: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var out []pos
	for n := 1; ; n++ {
		raw, err := br.ReadBytes('\n')
		if len(raw) == 0 && err == io.EOF {
			return out, nil
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("audit: verify %s: %w", path, err)
		}
		raw = bytes.TrimSuffix(raw, []byte("\n"))
		p, ok := parsePos(raw, path, n, res)
		if ok {
			out = append(out, p)
		}
	}
}

func parsePos(raw []byte, path string, n int, res *VerifyResult) (pos, bool) {
	var h struct {
		Seq      uint64 `json:"seq"`
		PrevHash string `json:"prev_hash"`
		Kind     Kind   `json:"kind"`
		Gap      *Gap   `json:"gap"`
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
	sum := sha256.Sum256(raw)
	return pos{file: path, line: n, seq: h.Seq, prev: h.PrevHash, hash: hex.EncodeToString(sum[:])}, true
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
	for i := 1; i < len(seqs); i++ {
		if seqs[i] == seqs[i-1]+1 {
			continue
		}
		a, b := seqs[i-1]+1, seqs[i]-1
		after := bySeq[seqs[i]]
		what := fmt.Sprintf("seq %d is missing", a)
		if b > a {
			what = fmt.Sprintf("seq %d..%d (%d records) are missing", a, b, b-a+1)
		}
		res.Problems = append(res.Problems, problem(after, "deleted",
			fmt.Sprintf("%s before seq %d", what, after.seq)))
	}
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
