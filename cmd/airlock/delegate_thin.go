//go:build airlock_thin

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// The thin build (bin/airlock-cli, built with -tags airlock_thin) links
// only the control API's client: it starts in a few milliseconds, which
// every client command bin/airlock hands it pays. The commands whose files need the
// appliance's packages (serve, the audit store, the policy engine, the
// certificate authority) are stubs here that exec the full build,
// airlockd, installed beside this binary: same PID, same arguments, same
// environment, so `airlock serve` under systemd and every script that runs
// `airlock logs` or `airlock policy check` see no difference. Their names
// and one-line help are listed here so `airlock --help` stays complete;
// TestThinBuild checks them against the full build's commands.

func init() {
	rootCmd.AddCommand(
		delegated("serve --config FILE", "Run the Airlock appliance (as root)"),
		delegated("principal", "Manage the callers of the control API's TCP listener (principals, tokens, scopes, quotas)"),
		delegated("ca", "Create, show or rotate the appliance certificate authority"),
		delegated("ui [--listen 127.0.0.1:PORT] [--url https://HOST:PORT --token-file FILE [--ca-file F | --fingerprint FP]]",
			"Open the live view: a local port proxying to the appliance's control API"),
		delegated("mcp", "Serve sandboxes to an AI agent over MCP (Model Context Protocol), on stdio or streamable HTTP"),
		delegated("logs", "Query the audit log: DNS, flows, requests, drops, commands"),
		delegated("report", "Write the review report of one sandbox (Markdown, or self-contained HTML)"),
		delegated("policy", "Check, explain and test egress policies"),
	)
	beforeExecute = delegateCompletion
}

// sandboxReplayCmd reads the audit store: airlockd runs it.
func sandboxReplayCmd() *cobra.Command {
	return delegated("replay ID", "Re-run a sandbox's recorded commands, in order, in a fresh sandbox, and compare")
}

// delegatedAnnotation marks a stub, for delegateCompletion and the tests.
const delegatedAnnotation = "airlock-delegated"

// delegated is a stub that hands the process's whole command line to
// airlockd, its flags and --help included (the full build prints the real
// help).
func delegated(use, short string) *cobra.Command {
	c := &cobra.Command{
		Use:                use,
		Short:              short,
		DisableFlagParsing: true,
		Annotations:        map[string]string{delegatedAnnotation: "true"},
		RunE:               func(*cobra.Command, []string) error { return execAppliance(os.Args[1:]) },
	}
	// `airlock help serve` asks the stub for its help: airlockd has it.
	c.SetHelpFunc(func(*cobra.Command, []string) {
		err := execAppliance(os.Args[1:])
		fmt.Fprintln(os.Stderr, "airlock:", err)
		os.Exit(1)
	})
	return c
}

// delegateCompletion sends the shell's completion requests for a stub's
// command line (cobra's hidden __complete command) to airlockd, which
// knows the stub's flags and subcommands.
func delegateCompletion(args []string) error {
	if len(args) == 0 || (args[0] != cobra.ShellCompRequestCmd && args[0] != cobra.ShellCompNoDescRequestCmd) {
		return nil
	}
	if c, _, err := rootCmd.Find(args[1:]); err == nil && c.Annotations[delegatedAnnotation] != "" {
		return execAppliance(args)
	}
	return nil
}

// execAppliance replaces this process with airlockd and the same
// arguments; it returns only when that fails.
func execAppliance(args []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding %s: %w", applianceBinary, err)
	}
	full := filepath.Join(filepath.Dir(self), applianceBinary)
	argv := append([]string{os.Args[0]}, args...)
	if err := syscall.Exec(full, argv, os.Environ()); err != nil {
		return fmt.Errorf("this command runs in the full build, %s: %w (make build puts it beside %s)", full, err, self)
	}
	return nil
}
