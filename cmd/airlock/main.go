// Command airlock is the Airlock appliance and its command-line client.
//
// make build builds it twice: whole as bin/airlockd, and with -tags
// airlock_thin as bin/airlock-cli, which links only the control API's
// client and execs airlockd for the rest (delegate_thin.go; the files of
// those commands carry //go:build !airlock_thin). Users run bin/airlock
// (cmd/airlock-front), which runs `sandbox exec` itself and execs
// airlock-cli for every other command line.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// applianceBinary is the full build's file name (make build puts it
// beside bin/airlock-cli, the thin build, which execs it for the commands it
// does not link; delegate_thin.go).
const applianceBinary = "airlockd"

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

func init() {
	rootCmd.AddCommand(versionCmd)
	rootCmd.Version = version
	rootCmd.SetVersionTemplate("airlock {{.Version}}\n")
}

func main() { os.Exit(run(os.Args[1:])) }

// beforeExecute, when set, sees the command line before cobra does (the
// thin build hands completion requests for its stubs to airlockd); an
// error is the command's.
var beforeExecute func(args []string) error

// run executes the command line and returns the exit status: 0 success,
// 1 the command ran and failed (or found what it checks for), 2 a usage
// error (unknown command or flag, bad arguments); commands may return
// other codes through exitError (run passes the sandbox command's).
func run(args []string) int {
	markUsageErrors(rootCmd)
	rootCmd.SetArgs(args)
	cmd, err := rootCmd, error(nil)
	if beforeExecute != nil {
		err = beforeExecute(args)
	}
	if err == nil {
		cmd, err = rootCmd.ExecuteC()
	}
	var ee exitError
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintf(rootCmd.ErrOrStderr(), "airlock: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return 2
	default:
		fmt.Fprintln(rootCmd.ErrOrStderr(), "airlock:", err)
		return 1
	}
}
