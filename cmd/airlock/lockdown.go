package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"airlock/client"
)

func init() {
	var (
		sandbox, reason string
		lift, asJSON    bool
	)
	c := &cobra.Command{
		Use:   "lockdown --reason WHY [--sandbox ID] [--lift]",
		Short: "Cut the network of every sandbox (or one) at once, in the kernel path",
		Long: `The kill switch for an incident. airlock lockdown sets one flag in the
kernel path: from the next packet on, every sandbox's traffic (DNS and ARP
included) is dropped with reason lockdown, whatever its policy says.
--sandbox ID cuts one sandbox; --lift restores. --reason is required and is
recorded, with who asked, in a lockdown event. The lockdown survives a
restart of airlock serve. Without --reason and --lift, nothing changes; use
airlock lockdown --status to see the state.`,
		Example: `  airlock lockdown --reason "incident 42: exfiltration suspected"
  airlock lockdown --sandbox sb-3f2a --reason "sb-3f2a pushed to an unknown remote"
  airlock lockdown --lift --reason "incident 42 contained"
  airlock lockdown --status`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			status, _ := cmd.Flags().GetBool("status")
			var st client.LockdownState
			var err error
			switch {
			case status:
				if lift || sandbox != "" || reason != "" {
					return usagef("lockdown: --status takes no other flag")
				}
				st, err = apiClient().Lockdown(ctx)
			case strings.TrimSpace(reason) == "":
				return usagef("lockdown: --reason is required (say why; it goes into the audit log)")
			default:
				st, err = apiClient().SetLockdown(ctx, client.LockdownRequest{Sandbox: sandbox, Lift: lift, Reason: reason})
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), st)
			}
			printLockdown(cmd.OutOrStdout(), st)
			return nil
		},
	}
	c.Flags().StringVar(&sandbox, "sandbox", "", "cut (or with --lift restore) only this sandbox")
	c.Flags().StringVar(&reason, "reason", "", "why (required to engage or lift; recorded in the lockdown event)")
	c.Flags().BoolVar(&lift, "lift", false, "restore the network")
	c.Flags().Bool("status", false, "print the lockdown state and change nothing")
	c.Flags().BoolVar(&asJSON, "json", false, "print the resulting state as JSON")
	addSocketFlag(c)
	rootCmd.AddCommand(c)
}

func printLockdown(w io.Writer, st client.LockdownState) {
	if a := st.All; a != nil {
		fmt.Fprintf(w, "lockdown: ENGAGED for every sandbox by %s since %s: %s\n", a.By, a.Since.Format("2006-01-02 15:04:05Z07:00"), a.Reason)
	} else {
		fmt.Fprintln(w, "lockdown: off for every sandbox")
	}
	for _, s := range st.Sandboxes {
		fmt.Fprintf(w, "lockdown: sandbox %s cut by %s since %s: %s\n", s.Sandbox, s.By, s.Since.Format("2006-01-02 15:04:05Z07:00"), s.Reason)
	}
}
