//go:build !airlock_thin

package main

import (
	"context"
	"fmt"
	"io"

	"airlock/audit"
	"airlock/client"
)

// egressOf reads a sandbox's decided requests from its records.
func egressOf(ctx context.Context, c *client.Client, id string) (audit.Egress, error) {
	g := audit.Egress{}
	err := c.Logs(ctx, client.LogQuery{Sandbox: id}, func(e audit.Event) error {
		g.Add(&e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("replay: read the egress of %s: %w", id, err)
	}
	return g, nil
}

// printEgressReplay prints the egress that differs between the original
// (old) and the replay (new), nothing when neither made a request, and
// returns how many differ.
func printEgressReplay(w io.Writer, old, new audit.Egress) int {
	if len(old)+len(new) == 0 {
		return 0
	}
	d := audit.DiffEgress(old, new)
	fmt.Fprintf(w, "egress: %d distinct request(s) before, %d in the replay, %d differ\n", len(old), len(new), len(d))
	for _, c := range d {
		fmt.Fprintf(w, "  %s: %s → %s\n", c.Request, outcomeOrNone(c.Old), outcomeOrNone(c.New))
	}
	return len(d)
}

func outcomeOrNone(o audit.Outcome) string {
	if o == "" {
		return "not made"
	}
	return string(o)
}
