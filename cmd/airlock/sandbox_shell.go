package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"airlock/client"
)

func sandboxShellCmd() *cobra.Command {
	var (
		env       []string
		user, cwd string
	)
	cmd := &cobra.Command{
		Use:   "shell ID [-- CMD [ARG...]]",
		Short: "Open a recorded shell in a sandbox (needs the attach scope)",
		Long: `Open an interactive terminal in the sandbox through its in-sandbox agent
(/bin/sh unless a command is given). The session is recorded: what was
typed and what was shown, each with its time, known secret values replaced
by [REDACTED], up to 1 MiB. The record is the artifact shells/EXEC_ID.jsonl
(airlock sandbox artifacts ID after the sandbox ends), its exec events carry
"record", and the sandbox's report links it. Only the sandbox's owner (or an
admin) with the attach scope may open one; a refusal is a refusal event.`,
		Example: `  airlock sandbox shell 3f2a9c1b7e4d
  airlock sandbox shell --user 1000 3f2a9c1b7e4d -- /bin/bash -l
  airlock sandbox artifacts 3f2a9c1b7e4d shells/x-1a2b.jsonl`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := client.ExecRequest{Argv: args[1:], User: user, Cwd: cwd}
			res, err := runTerminal(cmd, args[0], req, env, true, apiClient().Shell)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "\r\nairlock: session recorded as the artifact shells/%s.jsonl of sandbox %s\r\n", res.ID, args[0])
			return exitFor(cmd.ErrOrStderr(), res)
		},
	}
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "set KEY=VALUE in the session (repeatable)")
	cmd.Flags().StringVarP(&user, "user", "u", "", "run as this user (name, uid or uid:gid)")
	cmd.Flags().StringVarP(&cwd, "workdir", "w", "", "working directory (default /workspace)")
	return cmd
}
