package main

import (
	"fmt"

	"airlock/client"
	"airlock/internal/safefile"
	"airlock/policies"
)

// maxLockfile bounds a lockfile sent with a create request.
const maxLockfile = 16 << 20

// readLockfiles reads the --lockfile files and checks them here first,
// so a bad one is named with its line before anything is created.
func readLockfiles(paths []string) ([]client.Lockfile, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	out := make([]client.Lockfile, 0, len(paths))
	in := make([]policies.Lockfile, 0, len(paths))
	for _, p := range paths {
		b, err := safefile.Read(p, maxLockfile)
		if err != nil {
			return nil, fmt.Errorf("--lockfile: %w", err)
		}
		out = append(out, client.Lockfile{Name: p, Content: string(b)})
		in = append(in, policies.Lockfile{Name: p, Data: b})
	}
	if _, err := policies.ParseLockfiles(in, policies.Rule{}); err != nil {
		return nil, fmt.Errorf("--lockfile: %w", err)
	}
	return out, nil
}
