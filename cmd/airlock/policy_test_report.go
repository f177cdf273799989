//go:build !airlock_thin

package main

import (
	"fmt"
	"regexp"

	"airlock/policies"
)

// testOptions are the flags of `airlock policy test`.
type testOptions struct {
	output  string // text, json, junit or github
	verbose bool   // text: list passing cases too
	run     string // only cases whose name or request matches
}

var testFormats = []string{"text", "json", "junit", "github"}

// testReport is the outcome of `policy test` over its files, rendered by
// one of the -o formats.
type testReport struct {
	files    []testFileReport
	filtered bool // --run was given
}

type testFileReport struct {
	file    string
	loadErr error
	hash    string
	total   int // cases in the file, before --run
	cases   []testCaseReport
}

type testCaseReport struct {
	result policies.TestResult
	notes  []string // the rule or category it names does not exist
}

const noTestsMsg = "no [[tests]]: a policy without tests is not tested"

// runPolicyTests loads each file and runs the cases --run selects.
func runPolicyTests(files []string, match *regexp.Regexp) testReport {
	rep := testReport{filtered: match != nil}
	for _, f := range files {
		fr := testFileReport{file: f}
		p, err := loadPolicy(policyStdin, f)
		if err != nil {
			fr.loadErr = err
			rep.files = append(rep.files, fr)
			continue
		}
		fr.hash = p.Hash()
		results := p.RunTests()
		fr.total = len(results)
		for i, r := range results {
			if match != nil && !match.MatchString(r.Case.Name) && !match.MatchString(r.Case.Line) {
				continue
			}
			tc := testCaseReport{result: r}
			if !r.Pass {
				for _, w := range testWarnings(p, i) {
					tc.notes = append(tc.notes, w.Msg)
				}
			}
			fr.cases = append(fr.cases, tc)
		}
		rep.files = append(rep.files, fr)
	}
	return rep
}

func (f *testFileReport) passed() int {
	n := 0
	for _, c := range f.cases {
		if c.result.Pass {
			n++
		}
	}
	return n
}

// problem is what makes the file fail before any case runs: it does not
// load, or it has no tests.
func (f *testFileReport) problem() bool { return f.loadErr != nil || f.total == 0 }

func (f *testFileReport) ok() bool { return !f.problem() && f.passed() == len(f.cases) }

func (r *testReport) selected() int {
	n := 0
	for i := range r.files {
		n += len(r.files[i].cases)
	}
	return n
}

// ok: every file loads and has tests, every selected case passes, and a
// --run selects at least one case (a typo in it must not pass CI).
func (r *testReport) ok() bool {
	for i := range r.files {
		if !r.files[i].ok() {
			return false
		}
	}
	return !r.filtered || r.selected() > 0
}

func (r *testReport) counts() (passed, failed, errored int) {
	for i := range r.files {
		f := &r.files[i]
		if f.problem() {
			errored++
		}
		p := f.passed()
		passed += p
		failed += len(f.cases) - p
	}
	return passed, failed, errored
}

func caseName(c policies.TestCase) string {
	if c.Name != "" {
		return c.Name
	}
	return c.Line
}

func caseExpect(c policies.TestCase) string {
	want := c.Expect.String()
	if c.Rule != "" {
		want += " by " + c.Rule
	}
	return want
}

func caseActual(v policies.Verdict) string {
	return fmt.Sprintf("%s by %s — %s", verdictLine(v), v.Rule, v.Reason)
}
