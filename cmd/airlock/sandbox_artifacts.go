package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"airlock/client"
)

func sandboxArtifactsCmd() *cobra.Command {
	var out string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "artifacts ID [NAME]",
		Short: "List or fetch what a sandbox left when it ended",
		Long: `A sandbox that ends for any reason (rm, its lifetime, its container killed or
crashed, the appliance killed and restarted) leaves artifacts in the state
directory: the workspace diff (diff.patch, changes.json), the changed files
(files/PATH), its declared outputs (create --output PATH; outputs/N-NAME.tar),
its command records (commands.jsonl) and its review report (report.md). They
are kept within the [artifacts] bounds of the appliance config.

With only ID, the list; with NAME, that file's bytes (to standard output or -o).`,
		Example: `  airlock sandbox artifacts 3f2a9c1b7e4d
  airlock sandbox artifacts 3f2a9c1b7e4d diff.patch
  airlock sandbox artifacts 3f2a9c1b7e4d outputs/1-workspace_dist.tar -o dist.tar
  airlock sandbox artifacts 3f2a9c1b7e4d report.md | less`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			c := apiClient()
			if len(args) == 2 {
				return fetchArtifact(cmd, c, args[0], args[1], out)
			}
			a, err := c.Artifacts(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), a)
			}
			printArtifacts(cmd.OutOrStdout(), cmd.ErrOrStderr(), a)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the file here instead of standard output")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the manifest as JSON")
	return cmd
}

func fetchArtifact(cmd *cobra.Command, c *client.Client, id, name, out string) error {
	ctx, cancel := signalContext()
	defer cancel()
	var w io.Writer = cmd.OutOrStdout()
	if out != "" && out != "-" {
		f, err := os.OpenFile(out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("artifact %s: %w", name, err)
		}
		defer f.Close()
		w = f
	}
	return c.Artifact(ctx, id, name, w)
}

func printArtifacts(out, errw io.Writer, a client.Artifacts) {
	fmt.Fprintf(out, "sandbox %s (%s, policy %s) ended %s: %s\n", a.Sandbox.ID, a.Sandbox.Image, a.Sandbox.Policy,
		a.Ended.Local().Format("2006-01-02 15:04:05"), a.Reason)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tSIZE\tFROM")
	for _, f := range a.Files {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", f.Name, f.Kind, f.Size, f.Path)
	}
	tw.Flush()
	for _, s := range a.Skipped {
		fmt.Fprintln(errw, "airlock: not kept:", s)
	}
	for _, e := range a.Errors {
		fmt.Fprintln(errw, "airlock: export failed:", e)
	}
}

func sandboxResetCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "reset ID",
		Short: "Return a sandbox to the state it was created in, on the same address and policy",
		Long: `Replace the sandbox's container with a new one from the same image and spec:
everything written in it is gone, the workspace is mounted (or copied in)
again and the setup commands run again. The sandbox keeps its id, address,
policy, task secrets and network path. The lifecycle event "reset" names the
old and new containers and the image. A reset that fails destroys the
sandbox (its artifacts are kept).`,
		Example: `  airlock sandbox reset 3f2a9c1b7e4d
  airlock sandbox reset --json 3f2a9c1b7e4d | jq .new_container`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			res, err := apiClient().Reset(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "reset %s in %d ms: container %.12s -> %.12s, image %s, address %s\n",
				res.Sandbox.ID, res.DurationMS, res.OldContainer, res.NewContainer, res.ImageID, res.Sandbox.Address)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
