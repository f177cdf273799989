//go:build !airlock_thin

package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

var policyTestFiles = []string{
	"testdata/policytest/pass.toml", "testdata/policytest/fail.toml",
	"testdata/policytest/broken.toml", "testdata/policytest/notests.toml",
}

// TestPolicyOutputGolden: every -o format of policy test, and the --json of
// check and explain, on a policy that passes, one with a failing case, one
// that does not load and one without tests (users.md S10).
func TestPolicyOutputGolden(t *testing.T) {
	pass := policyTestFiles[0]
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"test-text.golden", append([]string{"test"}, policyTestFiles...), 1},
		{"test-text-verbose.golden", append([]string{"test", "-v"}, policyTestFiles...), 1},
		{"test-json.golden", append([]string{"test", "-o", "json"}, policyTestFiles...), 1},
		{"test-junit.golden", append([]string{"test", "-o", "junit"}, policyTestFiles...), 1},
		{"test-github.golden", append([]string{"test", "-o", "github"}, policyTestFiles...), 1},
		{"test-run.golden", []string{"test", "-v", "--run", "^push|docs are", pass, policyTestFiles[1]}, 0},
		{"test-run-none.golden", []string{"test", "-o", "json", "--run", "no such test", pass}, 1},
		{"check-json.golden", append([]string{"check", "--json"}, policyTestFiles...), 1},
		{"explain-json.golden", []string{"explain", "--json", pass, "GET https://api.staging.example.test/v2/items"}, 0},
		{"explain-text.golden", []string{"explain", pass, "POST https://git.example.test/acme/app.git/git-receive-pack"}, 0},
		{"explain-exit-code.golden", []string{"explain", "--exit-code", pass, "POST https://git.example.test/acme/app.git/git-receive-pack"}, 1},
	}
	for _, tc := range cases {
		t.Run(strings.TrimSuffix(tc.name, ".golden"), func(t *testing.T) {
			out, errs, code := runPolicy(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			switch {
			case strings.Contains(tc.name, "json") && !json.Valid([]byte(out)):
				t.Errorf("stdout is not JSON:\n%s", out)
			case strings.Contains(tc.name, "junit"):
				var v struct{}
				if err := xml.Unmarshal([]byte(out), &v); err != nil {
					t.Errorf("stdout is not XML: %v", err)
				}
			}
			golden(t, filepath.Join("testdata", "golden", tc.name), fmt.Sprintf("$ airlock policy %s\n# exit %d\n# stdout\n%s# stderr\n%s",
				strings.Join(tc.args, " "), code, out, errs))
		})
	}
}
