//go:build !airlock_thin

package main

import (
	"encoding/json"
	"io"

	"airlock/audit"
)

// verifyJSON is `airlock logs verify --json`: the verdict, the chain's
// extent and final hash, and every break located by file and line.
type verifyJSON struct {
	OK        bool                `json:"ok"`
	Files     int                 `json:"files"`
	Records   int                 `json:"records"`
	FirstSeq  uint64              `json:"first_seq"`
	LastSeq   uint64              `json:"last_seq"`
	FinalHash string              `json:"final_hash"`
	Problems  []verifyProblemJSON `json:"problems"`
	Notes     []string            `json:"notes"`
}

type verifyProblemJSON struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Seq     uint64 `json:"seq,omitempty"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// runLogsVerifyJSON exits 1 when the chain is broken, as the text form does.
func runLogsVerifyJSON(out io.Writer, anchors []audit.EndAnchor, files []string) error {
	res, err := audit.VerifyAnchored(anchors, files...)
	if err != nil {
		return err
	}
	j := verifyJSON{OK: res.OK(), Files: res.Files, Records: res.Records, FirstSeq: res.FirstSeq, LastSeq: res.LastSeq,
		FinalHash: res.FinalHash, Problems: []verifyProblemJSON{}, Notes: append([]string{}, res.Notes...)}
	for _, p := range res.Problems {
		j.Problems = append(j.Problems, verifyProblemJSON{File: p.File, Line: p.Line, Seq: p.Seq, Kind: p.Kind, Message: p.Msg})
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(j); err != nil {
		return err
	}
	if !j.OK {
		return exitError{1}
	}
	return nil
}
