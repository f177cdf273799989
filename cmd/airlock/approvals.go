package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"airlock/client"
)

func init() {
	var asJSON bool
	list := &cobra.Command{
		Use:   "approvals",
		Short: "List requests held for a human decision (policy action \"ask\")",
		Long: `List held requests — sandbox, the command it was running, destination and
the rule that asked — then recent decisions. Decide with airlock approve or
airlock deny; a hold that is not decided in time is denied.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			as, err := apiClient().Approvals(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), as)
			}
			if len(as) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "airlock: no held requests")
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tSANDBOX\tDESTINATION\tRULE\tCOMMAND\tWHEN")
			for _, a := range as {
				when := "expires in " + time.Until(a.Expires).Round(time.Second).String()
				if a.State != "held" {
					when = "by " + a.DecidedBy
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.State, a.Sandbox, a.Destination, a.Rule, a.Command, when)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	var (
		forDur time.Duration
		once   bool
	)
	approve := &cobra.Command{
		Use:   "approve ID [--for 1h | --once]",
		Short: "Let a held request through (once, or the destination for a while)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("for") && once {
				return fmt.Errorf("approve: --for and --once exclude each other")
			}
			d := client.Decision{Approve: true, Once: !cmd.Flags().Changed("for"), For: client.Duration(forDur)}
			return decide(cmd, args[0], d)
		},
	}
	approve.Flags().DurationVar(&forDur, "for", 0, "also allow the same sandbox to reach the same destination for this long")
	approve.Flags().BoolVar(&once, "once", false, "only this request (the default)")
	deny := &cobra.Command{
		Use:   "deny ID",
		Short: "Refuse a held request",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return decide(cmd, args[0], client.Decision{})
		},
	}
	for _, c := range []*cobra.Command{list, approve, deny} {
		addSocketFlag(c)
		rootCmd.AddCommand(c)
	}
}

func decide(cmd *cobra.Command, id string, d client.Decision) error {
	ctx, cancel := signalContext()
	defer cancel()
	a, err := apiClient().Decide(ctx, id, d)
	if err != nil {
		return err
	}
	extra := ""
	if a.For != "" && a.For != "once" {
		extra = " for " + a.For
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s from sandbox %s)%s; recorded as decided by %s\n",
		a.State, a.ID, a.Destination, a.Sandbox, extra, a.DecidedBy)
	return nil
}
