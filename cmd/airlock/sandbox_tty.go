package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"airlock/client"
	"airlock/internal/clifront"
)

// execTTY runs an interactive terminal session: this terminal in raw mode,
// its size followed (SIGWINCH), keys typed into the sandbox's terminal.
func execTTY(cmd *cobra.Command, id string, req client.ExecRequest, env []string, interactive bool) error {
	res, err := runTerminal(cmd, id, req, env, interactive, apiClient().ExecTTY)
	if err != nil {
		return err
	}
	return exitFor(cmd.ErrOrStderr(), res)
}

// terminalCall is the client method a terminal session goes through.
type terminalCall func(ctx context.Context, id string, req client.ExecRequest, stdin io.Reader, stdout io.Writer, resize <-chan client.Resize) (client.ExecResult, error)

// runTerminal runs a session on this terminal: raw mode when interactive,
// its size followed (SIGWINCH).
func runTerminal(cmd *cobra.Command, id string, req client.ExecRequest, env []string, interactive bool, call terminalCall) (client.ExecResult, error) {
	var err error
	if req.Env, err = clifront.KeyValues("--env", env); err != nil {
		return client.ExecResult{}, err
	}
	in := int(os.Stdin.Fd())
	resize := make(chan client.Resize, 1)
	if term.IsTerminal(in) {
		if w, h, err := term.GetSize(in); err == nil {
			req.Cols, req.Rows = uint16(w), uint16(h)
		}
		if interactive {
			old, err := term.MakeRaw(in)
			if err != nil {
				return client.ExecResult{}, fmt.Errorf("raw terminal: %w", err)
			}
			defer term.Restore(in, old)
		}
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if w, h, err := term.GetSize(in); err == nil {
					select {
					case resize <- client.Resize{Rows: uint16(h), Cols: uint16(w)}:
					default:
					}
				}
			}
		}()
	}
	var stdin io.Reader
	if interactive {
		stdin = os.Stdin
	}
	ctx, cancel := signalContext()
	defer cancel()
	return call(ctx, id, req, stdin, cmd.OutOrStdout(), resize)
}
