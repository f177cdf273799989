package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"airlock/client"
)

func init() {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Build, list, show and remove sandbox templates",
		Long: `A template is an image made by running setup commands in a sandbox under a
policy (their egress decided and logged like any sandbox's) and committing
the result. Each build is a version NAME:vN recording the image IDs, the
setup commands and their exit codes, the policy and its hash, the build
log and the time. Create a sandbox from one with
'airlock sandbox create --template NAME[:vN]'; it records the version and
image ID it came from.`,
	}
	cmd.AddCommand(templateBuildCmd(), templateLsCmd(), templateShowCmd(), templateRmCmd())
	for _, c := range cmd.Commands() {
		addSocketFlag(c)
	}
	rootCmd.AddCommand(cmd)
}

func templateBuildCmd() *cobra.Command {
	var from, policy, fromSandbox string
	var setup []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "build NAME --from IMAGE [--setup CMD]... [--policy P]",
		Short: "Run setup commands in a sandbox under a policy and record the result as a template version",
		Long: `Each --setup is a shell line run by /bin/sh -c in the build sandbox, in order.
A failing command stops the build with the command, its exit code and output,
and what the policy denied meanwhile; no template is left.`,
		Example: `  airlock template build py --from localhost/airlock/debian:12 --policy coding-agent \
      --setup 'pip install requests==2.32.3' --setup 'python3 -c "import requests"'
  airlock sandbox create --template py --policy coding-agent
  airlock template build tuned --from-sandbox 3f2a9c1b7e4d`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (from == "") == (fromSandbox == "") {
				return usagef("template build: give --from IMAGE or --from-sandbox ID")
			}
			ctx, cancel := signalContext()
			defer cancel()
			done := progress(cmd.ErrOrStderr(), fmt.Sprintf("building template %s from %s%s (%d setup commands)", args[0], from, fromSandbox, len(setup)))
			t, err := apiClient().BuildTemplate(ctx, client.TemplateRequest{Name: args[0], From: from, Setup: setup, Policy: policy, FromSandbox: fromSandbox})
			done(err)
			if err != nil {
				return err
			}
			if t.Snapshot != nil {
				for _, w := range t.Snapshot.Warnings {
					fmt.Fprintln(cmd.ErrOrStderr(), "airlock: warning: the template holds", w)
				}
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), t)
			}
			printTemplate(cmd.OutOrStdout(), t)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&fromSandbox, "from-sandbox", "", "make the template from a running sandbox's snapshot (warns of credentials, shell history, browser profiles and logs in it)")
	f.StringVar(&from, "from", "", "the image to start from")
	f.StringArrayVar(&setup, "setup", nil, "a shell line to run in the build sandbox (repeatable, in order)")
	f.StringVarP(&policy, "policy", "p", "", "the policy the build runs under (default: the appliance's default_policy)")
	f.BoolVar(&asJSON, "json", false, "print the template as JSON")
	return cmd
}

func templateLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Short:   "List template versions",
		Example: `  airlock template ls`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			ts, err := apiClient().Templates(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), ts)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TEMPLATE\tFROM\tIMAGE ID\tSETUP\tPOLICY\tCREATED")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%.19s\t%d\t%s\t%s\n", t.Ref, t.From, t.ImageID, len(t.Setup), t.Policy,
					t.Created.Local().Format("2006-01-02 15:04"))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func templateShowCmd() *cobra.Command {
	var asJSON, log bool
	cmd := &cobra.Command{
		Use:   "show NAME[:vN]",
		Short: "Show a template version (the newest without :vN) and, with --log, its build log",
		Example: `  airlock template show py
  airlock template show py:v2 --log`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			c := apiClient()
			if log {
				return c.TemplateLog(ctx, args[0], cmd.OutOrStdout())
			}
			t, err := c.Template(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), t)
			}
			printTemplate(cmd.OutOrStdout(), t)
			return nil
		},
	}
	cmd.Flags().BoolVar(&log, "log", false, "print the build log")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func templateRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME[:vN]...",
		Short: "Remove template versions (every version without :vN) and their images",
		Example: `  airlock template rm py:v1
  airlock template rm py`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			for _, ref := range args {
				got, err := apiClient().RemoveTemplate(ctx, ref)
				if err != nil {
					return err
				}
				for _, r := range got {
					fmt.Fprintln(cmd.OutOrStdout(), "removed", r)
				}
			}
			return nil
		},
	}
}

func printTemplate(w io.Writer, t client.Template) {
	fmt.Fprintf(w, "template %s\n  image     %s (%s)\n  from      %s (%s)\n  policy    %s %s\n  built     %s in sandbox %s\n",
		t.Ref, t.Image, t.ImageID, t.From, t.FromImageID, t.Policy, t.PolicyHash, t.Created.Local().Format("2006-01-02 15:04:05"), t.Sandbox)
	if s := t.Snapshot; s != nil {
		fmt.Fprintf(w, "  snapshot  %d added, %d modified, %d deleted\n", s.Added, s.Modified, s.Deleted)
		for _, x := range s.Warnings {
			fmt.Fprintf(w, "  warning   %s\n", x)
		}
	}
	for i, s := range t.Setup {
		fmt.Fprintf(w, "  setup %d   exit %d in %d ms: %s\n", i+1, s.ExitCode, s.DurationMS, s.Command)
	}
}
