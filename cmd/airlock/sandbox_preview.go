package main

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"airlock/client"
)

func sandboxExposeCmd() *cobra.Command {
	var (
		ttl, name string
		to        []string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "expose ID PORT",
		Short: "Show a sandbox's web app to reviewers through an expiring, authenticated preview URL",
		Long: `Expose one port of a sandbox (a dev server listening on it inside the
sandbox) on the appliance's preview listener ([preview] in the appliance
config) at https://PREVIEW.HOST/. The appliance connects to 127.0.0.1:PORT
inside the sandbox's network namespace; nothing else becomes reachable.

It prints a one-time link per principal of --to (default: you): its first
use sets a cookie for that preview only and removes the token from the URL.
The preview ends at --ttl, with its sandbox, or on 'airlock sandbox unexpose'.
Every request through it is an 'ingress' event (airlock logs --kind ingress).`,
		Example: `  airlock sandbox expose 3f2a9c1b7e4d 5173
  airlock sandbox expose 3f2a9c1b7e4d 8080 --ttl 2h --to alice --to bob --name storybook`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var port int
			if _, err := fmt.Sscanf(args[1], "%d", &port); err != nil || fmt.Sprint(port) != args[1] {
				return fmt.Errorf("port: want a number 1-65535, not %q", args[1])
			}
			ctx, cancel := signalContext()
			defer cancel()
			p, err := apiClient().Expose(ctx, args[0], client.ExposeRequest{Port: port, TTL: ttl, To: to, Name: name})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), p)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "preview %s of port %d until %s\n", p.ID, p.Port, p.Expires.Local().Format(time.RFC3339))
			names := make([]string, 0, len(p.Links))
			for n := range p.Links {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				fmt.Fprintf(w, "  %s: %s\n", n, p.Links[n])
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&ttl, "ttl", "", "how long the preview lives (e.g. 30m, 2h; default [preview] default_ttl)")
	f.StringArrayVar(&to, "to", nil, "a principal who may open it (repeatable; default: you)")
	f.StringVar(&name, "name", "", "a label for the preview")
	f.BoolVar(&asJSON, "json", false, "print the preview as JSON")
	return cmd
}

func sandboxPreviewsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "previews ID",
		Short:   "List a sandbox's live previews",
		Example: `  airlock sandbox previews 3f2a9c1b7e4d`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			ps, err := apiClient().Previews(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), ps)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PREVIEW\tPORT\tNAME\tTO\tEXPIRES\tURL")
			for _, p := range ps {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", p.ID, p.Port, p.Name, strings.Join(p.To, ","),
					p.Expires.Local().Format(time.RFC3339), p.URL)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the previews as JSON")
	return cmd
}

func sandboxUnexposeCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "unexpose ID PREVIEW",
		Short:   "Revoke a preview; its open connections are closed",
		Example: `  airlock sandbox unexpose 3f2a9c1b7e4d pv9c1f0e2a3b4d5c6e`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			if err := apiClient().Unexpose(ctx, args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", args[1])
			return nil
		},
	}
}
