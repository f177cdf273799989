package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"airlock/client"

	"github.com/spf13/cobra"
)

func sandboxShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Describe one sandbox: its state, owner, policy, address, image, limits and lockfiles",
		Long: `Describe one sandbox. Its state is creating, running, paused or ending
(docs/api.md, "Sandbox states"); once it has ended it is gone from here:
'airlock sandbox artifacts ID' and 'airlock report ID' show what it left.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			sb, err := apiClient().Get(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), sb)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			for _, row := range [][2]string{
				{"id", sb.ID}, {"state", string(sb.State)}, {"owner", dashIf(sb.Owner)}, {"policy", sb.Policy},
				{"policy hash", dashIf(sb.PolicyHash)}, {"address", dashIf(sb.Address)}, {"image", sb.Image},
				{"image id", dashIf(sb.ImageID)}, {"template", dashIf(sb.Template)}, {"agent", dashIf(sb.Agent)},
				{"created", sb.Created.Local().Format(time.RFC3339)}, {"lifetime left", lifetimeLeft(sb.Deadline)},
				{"idle timeout", dashIf(idleText(time.Duration(sb.IdleTimeout)))}, {"workspace", dashIf(sb.Workspace)},
				{"secrets", dashIf(strings.Join(sb.Secrets, ", "))}, {"limits", dashIf(strings.Join(sb.Limits, ", "))},
				{"lockfiles", dashIf(lockfilesText(sb.Lockfiles))},
			} {
				fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
			}
			for _, w := range sb.Warnings {
				fmt.Fprintf(tw, "warning\t%s\n", w)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// lockfilesText lists a sandbox's lockfiles: "web/package-lock.json (3
// entries), requirements.txt (1 entry)".
func lockfilesText(files []client.SandboxLockfile) string {
	parts := make([]string, len(files))
	for i, f := range files {
		unit := "entries"
		if f.Entries == 1 {
			unit = "entry"
		}
		parts[i] = fmt.Sprintf("%s (%d %s)", f.Name, f.Entries, unit)
	}
	return strings.Join(parts, ", ")
}

func idleText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
