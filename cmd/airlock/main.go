// Command airlock is the Airlock appliance and its command-line client.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitError carries a process exit code through cobra without printing twice.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

var rootCmd = &cobra.Command{
	Use:   "airlock",
	Short: "Egress control and sandboxes for AI agents",
	Long: `Airlock runs agent tasks in rootless Podman sandboxes whose only network path
is pinned by eBPF into Airlock's TLS-inspecting proxy and policy DNS resolver.
A TOML policy decides what each sandbox may reach; every decision is logged.`,
	SilenceUsage:  true,
	SilenceErrors: true,
}

var versionCmd = &cobra.Command{
	Use:   "version",
	Short: "Print the airlock version",
	Args:  cobra.NoArgs,
	RunE: func(cmd *cobra.Command, _ []string) error {
		_, err := fmt.Fprintf(cmd.OutOrStdout(), "airlock %s\n", version)
		return err
	},
}

func init() { rootCmd.AddCommand(versionCmd) }

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	rootCmd.SetArgs(args)
	err := rootCmd.Execute()
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintln(os.Stderr, "airlock:", err)
		return 1
	}
}
