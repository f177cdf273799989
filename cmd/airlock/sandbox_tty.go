package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"airlock/client"
)

// execTTY runs an interactive terminal session.
func execTTY(cmd *cobra.Command, id string, req client.ExecRequest, env []string) error {
	return fmt.Errorf("--tty: terminal sessions are served by the agent's API but not yet by the control API; use --background and attach")
}
