package main

import (
	"fmt"

	"airlock/client"
	"airlock/internal/safefile"
)

// maxLockfile bounds a lockfile sent with a create request (the
// appliance's own bound, policies.maxLockfile, is the same).
const maxLockfile = 16 << 20

// readLockfiles reads the --lockfile files (regular files of bounded size)
// and sends them by content under the path given. Their content is judged
// by the appliance before it creates anything: a bad one is refused as
// invalid, naming its file and line (the thin CLI does not link the
// lockfile parsers; TestThinCLILinksNoAppliance).
func readLockfiles(paths []string) ([]client.Lockfile, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	out := make([]client.Lockfile, 0, len(paths))
	for _, p := range paths {
		b, err := safefile.Read(p, maxLockfile)
		if err != nil {
			return nil, fmt.Errorf("--lockfile: %w", err)
		}
		out = append(out, client.Lockfile{Name: p, Content: string(b)})
	}
	return out, nil
}
