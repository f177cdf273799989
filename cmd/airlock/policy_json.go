//go:build !airlock_thin

package main

import (
	"errors"

	"airlock/policies"
)

// The JSON shapes of `policy check --json`, `policy explain --json` and
// `policy test -o json` (docs/policy.md, "Machine output"). Positions are
// given both as "file:line:col" and as their parts, for annotations.

type jsonPos struct {
	Position string `json:"position,omitempty"`
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Col      int    `json:"col,omitempty"`
}

func posJSON(p policies.Position) jsonPos {
	if p.File == "" {
		return jsonPos{}
	}
	return jsonPos{Position: p.String(), File: p.File, Line: p.Line, Col: p.Col}
}

type jsonProblem struct {
	jsonPos
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
}

func problemsJSON(list []*policies.Error) []jsonProblem {
	out := make([]jsonProblem, 0, len(list))
	for _, e := range list {
		out = append(out, jsonProblem{jsonPos: posJSON(e.Pos), Path: e.Path, Message: e.Msg})
	}
	return out
}

// loadProblems is a load error as positioned problems (a file that cannot
// be read has one, at the file).
func loadProblems(file string, err error) []jsonProblem {
	var el policies.ErrorList
	if errors.As(err, &el) {
		return problemsJSON(el)
	}
	return []jsonProblem{{jsonPos: jsonPos{Position: file, File: file}, Message: err.Error()}}
}

type jsonRule struct {
	Name string `json:"name"`
	jsonPos
}

func ruleJSON(r policies.Rule) jsonRule { return jsonRule{Name: r.Name, jsonPos: posJSON(r.Pos)} }

type jsonVerdict struct {
	Action    string   `json:"action"`
	WouldDeny bool     `json:"would_deny"`
	Category  string   `json:"category,omitempty"`
	Kind      string   `json:"kind,omitempty"`
	Rule      jsonRule `json:"rule"`
	Reason    string   `json:"reason"`
}

func verdictJSON(v policies.Verdict) jsonVerdict {
	j := jsonVerdict{Action: v.Action.String(), WouldDeny: v.WouldDeny, Category: v.Category, Rule: ruleJSON(v.Rule), Reason: v.Reason}
	if v.Category != "" {
		j.Kind = v.Kind.String()
	}
	return j
}

type checkFileJSON struct {
	File       string        `json:"file"`
	OK         bool          `json:"ok"`
	SHA256     string        `json:"sha256,omitempty"`
	Categories int           `json:"categories"`
	Tests      int           `json:"tests"`
	Errors     []jsonProblem `json:"errors"`
	Warnings   []jsonProblem `json:"warnings"`
}

type checkResultJSON struct {
	OK     bool            `json:"ok"`
	Strict bool            `json:"strict"`
	Files  []checkFileJSON `json:"files"`
}

type explainJSON struct {
	File       string         `json:"file"`
	Request    string         `json:"request"`
	Verdict    jsonVerdict    `json:"verdict"`
	Handling   string         `json:"handling,omitempty"` // "inspect" or "splice", for an allowed category
	Inject     *injectJSON    `json:"inject,omitempty"`
	Considered []consideredJS `json:"considered"`
}

type injectJSON struct {
	Header string `json:"header"`
	Secret string `json:"secret"`
}

type consideredJS struct {
	Rule    jsonRule `json:"rule"`
	Outcome string   `json:"outcome"`
}

func explanationJSON(file, line string, ex policies.Explanation) explainJSON {
	v := ex.Verdict
	j := explainJSON{File: file, Request: line, Verdict: verdictJSON(v), Considered: []consideredJS{}}
	if c := v.Cat; c != nil && v.Action.Allows() {
		j.Handling = "splice"
		if c.Inspect {
			j.Handling = "inspect"
		}
		if c.Inject != nil {
			j.Inject = &injectJSON{Header: c.Inject.Header, Secret: c.Inject.Secret}
		}
	}
	for _, c := range ex.Considered {
		j.Considered = append(j.Considered, consideredJS{Rule: ruleJSON(c.Rule), Outcome: c.Outcome})
	}
	return j
}
