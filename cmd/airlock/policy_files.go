//go:build !airlock_thin

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"airlock/policies"
)

// stdinName is how a policy read from standard input ("-") is named.
const stdinName = "<stdin>"

// expandPolicyArgs turns each directory argument into its *.toml files,
// as serve reads policy_dir (users.md S10: `policy check DIR` said "is a
// directory"). "-" stays: loadPolicy reads it from standard input, once.
func expandPolicyArgs(args []string) ([]string, error) {
	var out []string
	stdin := false
	for _, a := range args {
		if a == "-" {
			if stdin {
				return nil, usagef("\"-\" (standard input) given twice")
			}
			stdin = true
			out = append(out, a)
			continue
		}
		fi, err := os.Stat(a)
		if err != nil || !fi.IsDir() {
			out = append(out, a) // Load reports what is wrong with it
			continue
		}
		m, err := filepath.Glob(filepath.Join(a, "*.toml"))
		if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("%s: no *.toml policy files in the directory", a)
		}
		sort.Strings(m)
		out = append(out, m...)
	}
	return out, nil
}

// loadPolicy loads a policy file, or with "-" one read from in (at most
// MaxPolicySize; more is an error, as for a file).
func loadPolicy(in io.Reader, file string) (*policies.Policy, error) {
	if file != "-" {
		return policies.Load(file)
	}
	data, err := io.ReadAll(io.LimitReader(in, policies.MaxPolicySize+1))
	if err != nil {
		return nil, fmt.Errorf("policy: read standard input: %w", err)
	}
	return policies.Parse(stdinName, data) // Parse refuses more than MaxPolicySize
}
