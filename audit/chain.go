package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Range is a sandbox's records in the chain: the first and last sequence
// numbers written for it and the hash of its last record. The pipeline
// writes it into the lifecycle record that ends the sandbox.
type Range struct {
	FirstSeq  uint64 `json:"first_seq"`
	LastSeq   uint64 `json:"last_seq"`
	FinalHash string `json:"final_hash"`
}

// sequencer gives records their place in the hash chain. It is used by one
// goroutine at a time.
type sequencer struct {
	seq     uint64
	last    [32]byte
	started bool // false until the first record: its prev_hash is ""
	ranges  map[string]*Range
}

func newSequencer() *sequencer { return &sequencer{ranges: map[string]*Range{}} }

// resume continues the chain after raw, the last record written before
// (in either flavor: an OCSF line's chained record is unmapped.airlock).
func (s *sequencer) resume(raw []byte) error {
	raw, err := chainedRecord(raw)
	if err != nil {
		return fmt.Errorf("audit: resume chain: %w", err)
	}
	var h struct {
		Seq uint64 `json:"seq"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return fmt.Errorf("audit: resume chain: last record is not JSON: %w", err)
	}
	s.seq, s.last, s.started = h.Seq, sha256.Sum256(raw), true
	return nil
}

// next places r after the previous record.
func (s *sequencer) next(r *record) (line, error) {
	body := r.body
	if r.end != nil {
		if rg, ok := s.ranges[r.sandbox]; ok && r.end.Lifecycle.FinalHash == "" {
			r.end.Lifecycle.FirstSeq, r.end.Lifecycle.LastSeq = rg.FirstSeq, rg.LastSeq
			r.end.Lifecycle.FinalHash = rg.FinalHash
		}
		b, err := marshalBody(r.end)
		if err != nil {
			return line{}, fmt.Errorf("audit: encode lifecycle event: %w", err)
		}
		body = b
	}
	seq := s.seq + 1
	raw := chainLine(body, seq, s.last, !s.started)
	l := line{rec: r, seq: seq, raw: raw, hash: sha256.Sum256(raw)}
	if r.ocsf != nil {
		l.stream = ocsfLine(r.ocsf, seq, raw)
	}
	s.seq, s.last, s.started = seq, l.hash, true
	s.track(r, &l)
	return l, nil
}

func (s *sequencer) track(r *record, l *line) {
	if r.sandbox == "" {
		return
	}
	if r.end != nil {
		delete(s.ranges, r.sandbox)
		return
	}
	rg := s.ranges[r.sandbox]
	if rg == nil {
		rg = &Range{FirstSeq: l.seq}
		s.ranges[r.sandbox] = rg
	}
	rg.LastSeq, rg.FinalHash = l.seq, hex.EncodeToString(l.hash[:])
}

func (s *sequencer) rangeOf(sandbox string) (Range, bool) {
	rg, ok := s.ranges[sandbox]
	if !ok {
		return Range{}, false
	}
	return *rg, true
}
