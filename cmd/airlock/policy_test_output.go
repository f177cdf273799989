//go:build !airlock_thin

package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"airlock/policies"
)

// writeTestText is the default output: failures on errw as
// file:line:col: FAIL name with the expected and actual verdicts, a
// summary line per file on out; -v lists passing cases on out too.
func writeTestText(out, errw io.Writer, r *testReport, verbose bool) {
	for i := range r.files {
		f := &r.files[i]
		switch {
		case f.loadErr != nil:
			printLoadError(errw, f.loadErr)
			continue
		case f.total == 0:
			fmt.Fprintf(errw, "%s: %s\n", f.file, noTestsMsg)
			continue
		}
		for _, c := range f.cases {
			if c.result.Pass {
				if verbose {
					fmt.Fprintf(out, "%s: PASS %s\n", c.result.Case.Pos, caseName(c.result.Case))
				}
				continue
			}
			writeFailure(errw, c.result)
			for _, n := range c.notes {
				fmt.Fprintf(errw, "    %s\n", n)
			}
		}
		line := fmt.Sprintf("%s: %d/%d tests passed", f.file, f.passed(), len(f.cases))
		if r.filtered {
			line += fmt.Sprintf(" (--run selected %d of %d)", len(f.cases), f.total)
		}
		fmt.Fprintln(out, line)
	}
	if r.filtered && r.selected() == 0 {
		fmt.Fprintln(errw, "airlock: --run selected no test")
	}
}

func writeFailure(w io.Writer, r policies.TestResult) {
	fmt.Fprintf(w, "%s: FAIL %s\n", r.Case.Pos, caseName(r.Case))
	fmt.Fprintf(w, "    request:  %s\n", r.Case.Line)
	fmt.Fprintf(w, "    expected: %s\n", caseExpect(r.Case))
	fmt.Fprintf(w, "    actual:   %s\n", caseActual(r.Verdict))
	for _, p := range r.Problems {
		fmt.Fprintf(w, "    %s\n", p)
	}
}

type testJSON struct {
	OK     bool           `json:"ok"`
	Passed int            `json:"passed"`
	Failed int            `json:"failed"`
	Errors int            `json:"errors"` // files that do not load or have no tests
	Files  []testFileJSON `json:"files"`
}

type testFileJSON struct {
	File   string         `json:"file"`
	OK     bool           `json:"ok"`
	SHA256 string         `json:"sha256,omitempty"`
	Errors []jsonProblem  `json:"errors"`
	Total  int            `json:"total"` // cases in the file, before --run
	Passed int            `json:"passed"`
	Failed int            `json:"failed"`
	Tests  []testCaseJSON `json:"tests"`
}

type testCaseJSON struct {
	Name    string `json:"name,omitempty"`
	Request string `json:"request"`
	jsonPos
	Expect   expectJSON  `json:"expect"`
	Pass     bool        `json:"pass"`
	Verdict  jsonVerdict `json:"verdict"`
	Problems []string    `json:"problems"`
	Notes    []string    `json:"notes,omitempty"`
}

type expectJSON struct {
	Action    string `json:"action"`
	Rule      string `json:"rule,omitempty"`
	Category  string `json:"category,omitempty"`
	WouldDeny *bool  `json:"would_deny,omitempty"`
}

func writeTestJSON(out io.Writer, r *testReport) error {
	p, f, e := r.counts()
	j := testJSON{OK: r.ok(), Passed: p, Failed: f, Errors: e, Files: []testFileJSON{}}
	for i := range r.files {
		fr := &r.files[i]
		fj := testFileJSON{File: fr.file, OK: fr.ok(), SHA256: fr.hash, Errors: []jsonProblem{}, Total: fr.total,
			Passed: fr.passed(), Failed: len(fr.cases) - fr.passed(), Tests: []testCaseJSON{}}
		switch {
		case fr.loadErr != nil:
			fj.Errors = loadProblems(fr.file, fr.loadErr)
		case fr.total == 0:
			fj.Errors = []jsonProblem{{jsonPos: jsonPos{Position: fr.file, File: fr.file}, Message: noTestsMsg}}
		}
		for _, c := range fr.cases {
			fj.Tests = append(fj.Tests, caseJSON(c))
		}
		j.Files = append(j.Files, fj)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(j)
}

func caseJSON(c testCaseReport) testCaseJSON {
	tc := c.result.Case
	return testCaseJSON{Name: tc.Name, Request: tc.Line, jsonPos: posJSON(tc.Pos),
		Expect: expectJSON{Action: tc.Expect.String(), Rule: tc.Rule, Category: tc.Category, WouldDeny: tc.WouldDeny},
		Pass:   c.result.Pass, Verdict: verdictJSON(c.result.Verdict), Problems: append([]string{}, c.result.Problems...), Notes: c.notes}
}

// JUnit XML as CI servers read it (one testsuite per policy file; a file
// that does not load or has no tests is one errored testcase).
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	File      string        `xml:"file,attr,omitempty"`
	Line      int           `xml:"line,attr,omitempty"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",cdata"`
}

func writeTestJUnit(out io.Writer, r *testReport) error {
	p, f, e := r.counts()
	s := junitSuites{Name: "airlock policy test", Tests: p + f + e, Failures: f, Errors: e}
	for i := range r.files {
		s.Suites = append(s.Suites, junitFileSuite(&r.files[i]))
	}
	if _, err := io.WriteString(out, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(out)
	enc.Indent("", "  ")
	if err := enc.Encode(s); err != nil {
		return err
	}
	_, err := io.WriteString(out, "\n")
	return err
}

func junitFileSuite(f *testFileReport) junitSuite {
	su := junitSuite{Name: f.file}
	if f.problem() {
		var text strings.Builder
		name, msg := "tests", noTestsMsg
		if f.loadErr != nil {
			printLoadError(&text, f.loadErr)
			name, msg = "load", "the policy does not load"
		}
		su.Tests, su.Errors = 1, 1
		su.Cases = []junitCase{{Name: name, Classname: f.file, File: f.file,
			Error: &junitProblem{Message: msg, Type: "policy", Text: text.String()}}}
		return su
	}
	for _, c := range f.cases {
		tc := c.result.Case
		jc := junitCase{Name: caseName(tc), Classname: f.file, File: tc.Pos.File, Line: tc.Pos.Line}
		if !c.result.Pass {
			var text strings.Builder
			writeFailure(&text, c.result)
			for _, n := range c.notes {
				fmt.Fprintf(&text, "    %s\n", n)
			}
			jc.Failure = &junitProblem{Message: strings.Join(c.result.Problems, "; "), Type: "verdict", Text: text.String()}
			su.Failures++
		}
		su.Tests++
		su.Cases = append(su.Cases, jc)
	}
	return su
}

// writeTestGitHub prints GitHub Actions workflow commands: an ::error
// annotation at each failing case and each file that does not load, then
// the summary lines.
func writeTestGitHub(out io.Writer, r *testReport) {
	for i := range r.files {
		f := &r.files[i]
		switch {
		case f.loadErr != nil:
			for _, p := range loadProblems(f.file, f.loadErr) {
				annotate(out, p.jsonPos, "policy does not load", joinNonEmpty(p.Path, p.Message))
			}
		case f.total == 0:
			annotate(out, jsonPos{File: f.file}, "policy test", noTestsMsg)
		}
		for _, c := range f.cases {
			if c.result.Pass {
				continue
			}
			tc := c.result.Case
			msg := []string{"request:  " + tc.Line, "expected: " + caseExpect(tc), "actual:   " + caseActual(c.result.Verdict)}
			msg = append(append(msg, c.result.Problems...), c.notes...)
			annotate(out, posJSON(tc.Pos), "FAIL "+caseName(tc), strings.Join(msg, "\n"))
		}
	}
	for i := range r.files {
		f := &r.files[i]
		if !f.problem() {
			fmt.Fprintf(out, "%s: %d/%d tests passed\n", f.file, f.passed(), len(f.cases))
		}
	}
	if r.filtered && r.selected() == 0 {
		fmt.Fprintln(out, "::error title=policy test::--run selected no test")
	}
}

func joinNonEmpty(path, msg string) string {
	if path == "" {
		return msg
	}
	return path + ": " + msg
}

// annotate writes one ::error workflow command, escaped as the runner
// expects ('%', CR and LF in the message; also ':' and ',' in properties).
func annotate(w io.Writer, p jsonPos, title, msg string) {
	props := []string{}
	if p.File != "" {
		props = append(props, "file="+ghProp(p.File))
	}
	if p.Line > 0 {
		props = append(props, fmt.Sprintf("line=%d", p.Line), fmt.Sprintf("col=%d", p.Col))
	}
	props = append(props, "title="+ghProp(title))
	fmt.Fprintf(w, "::error %s::%s\n", strings.Join(props, ","), ghData(msg))
}

var ghDataEscaper = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
var ghPropEscaper = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C")

func ghData(s string) string { return ghDataEscaper.Replace(s) }
func ghProp(s string) string { return ghPropEscaper.Replace(s) }
