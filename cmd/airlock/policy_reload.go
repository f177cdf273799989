//go:build !airlock_thin

package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func init() {
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Ask the running appliance to validate and reload its policy directory",
		Long: `Reload the policy directory of a running airlock serve (the same as sending
it SIGHUP). Every file is validated first: a file with errors is rejected,
its errors are printed, and the running version of that policy stays.
Each outcome is an audit event (kind policy) with the old and new hashes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			res, err := apiClient().ReloadPolicies(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, r := range res.Reloaded {
				old := r.OldHash
				if old == "" {
					old = "(new)"
				}
				fmt.Fprintf(out, "reloaded %s: %.12s -> %.12s\n", r.Name, old, r.NewHash)
			}
			for _, n := range res.Unchanged {
				fmt.Fprintf(out, "unchanged %s\n", n)
			}
			if res.ClosedTunnels > 0 {
				fmt.Fprintf(out, "closed %d open tunnel(s) the new policy denies\n", res.ClosedTunnels)
			}
			for _, r := range res.Rejected {
				fmt.Fprintf(cmd.ErrOrStderr(), "rejected %s (the running version stays):\n  %s\n", r.Name, strings.Join(r.Errors, "\n  "))
			}
			if len(res.Rejected) > 0 {
				return exitError{1}
			}
			return nil
		},
	}
	addSocketFlag(cmd)
	policyCmd.AddCommand(cmd)
}
