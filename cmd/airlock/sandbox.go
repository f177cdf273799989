package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"airlock/client"
	"airlock/internal/clifront"
)

func init() {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create, use and remove sandboxes on a running appliance",
		Long: `Manage sandboxes through the control API of a running airlock serve
(--socket, $AIRLOCK_SOCKET, or ` + client.DefaultSocket + `).`,
	}
	cmd.AddCommand(sandboxCreateCmd(), sandboxExecCmd(), sandboxCpCmd(), sandboxLsCmd(), sandboxShowCmd(), sandboxDiffCmd(),
		sandboxPsCmd(), sandboxKillCmd(), sandboxAttachCmd(), sandboxFilesCmd(),
		sandboxSimpleCmd("pause", "Stop a sandbox: its network cut in the kernel, its processes stopped (SIGSTOP)", (*client.Client).Pause, "paused"),
		sandboxSimpleCmd("resume", "Continue a paused sandbox and restore its network", (*client.Client).Resume, "resumed"),
		sandboxSimpleCmd("rm", "Destroy sandboxes: container, network path, address and secrets", (*client.Client).Delete, "removed"),
		sandboxSnapshotCmd(), sandboxArtifactsCmd(), sandboxResetCmd(), sandboxReplayCmd(), sandboxShellCmd(),
		sandboxExposeCmd(), sandboxPreviewsCmd(), sandboxUnexposeCmd())
	for _, c := range cmd.Commands() {
		addSocketFlag(c)
	}
	rootCmd.AddCommand(cmd)
}

func sandboxCreateCmd() *cobra.Command {
	var (
		policy, workspace string
		env, secrets      []string
		capAdd, outputs   []string
		execTimeout, life time.Duration
		idle              time.Duration
		readOnly, asJSON  bool
		copyWS            bool
		gitURL, template  string
		lockfiles         []string
	)
	cmd := &cobra.Command{
		Use:   "create [flags] [IMAGE]",
		Short: "Create a sandbox and print its id",
		Example: `  airlock sandbox create --policy coding-agent localhost/airlock/debian:12
  airlock sandbox create -p coding-agent -w ./src --copy-workspace --output /workspace/dist --lifetime 1h
  airlock sandbox create -p coding-agent --template py:v2
  airlock sandbox create -p coding-agent --lockfile package-lock.json --lockfile uv.lock`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			image := ""
			if len(args) == 1 {
				image = args[0]
			}
			req, err := createRequest(image, policy, workspace, env, secrets)
			if err != nil {
				return err
			}
			req.ExecTimeout, req.Lifetime, req.ReadOnly = client.Duration(execTimeout), client.Duration(life), readOnly
			req.IdleTimeout = client.Duration(idle)
			req.CapAdd, req.Outputs, req.Template = capAdd, outputs, template
			if copyWS {
				req.WorkspaceMode = "copy"
			}
			if err := setWorkspaceGit(&req, gitURL); err != nil {
				return err
			}
			if req.Lockfiles, err = readLockfiles(lockfiles); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			done := progress(cmd.ErrOrStderr(), createStep("creating sandbox", req))
			sb, err := apiClient().Create(ctx, req)
			done(err)
			if err != nil {
				return explainCreate(err, image)
			}
			for _, w := range sb.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "airlock: warning:", w)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), sb)
			}
			fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&policy, "policy", "p", "", "policy name (default: the appliance's default_policy)")
	f.StringVarP(&workspace, "workspace", "w", "", "host directory bind-mounted at /workspace (on the appliance's host; an admin's, and on the socket one you own or root)")
	f.StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE in the sandbox's environment (repeatable)")
	f.StringArrayVar(&secrets, "secret", nil, "NAME=VALUE task secret for proxy injection (repeatable)")
	f.DurationVar(&execTimeout, "exec-timeout", 0, "default timeout of each command")
	f.DurationVar(&life, "lifetime", 0, "destroy the sandbox after this long")
	f.DurationVar(&idle, "idle-timeout", 0, "destroy the sandbox once no command ran in it for this long, e.g. --idle-timeout 30m (default sandbox.idle_timeout)")
	f.BoolVar(&copyWS, "copy-workspace", false, "copy the workspace in instead of mounting it")
	f.StringVar(&gitURL, "workspace-git", "", "https URL cloned into /workspace (git clone --depth 1) from inside the sandbox, through the proxy, as the first setup step; the image needs git")
	f.BoolVar(&readOnly, "read-only", false, "read-only root filesystem (tmpfs /tmp, /var/tmp, /run)")
	f.StringArrayVar(&capAdd, "cap-add", nil, "grant NET_RAW or NET_ADMIN inside the sandbox's own namespaces (repeatable)")
	f.StringVar(&template, "template", "", "start from a template version, NAME (the newest) or NAME:vN, instead of IMAGE (see 'airlock template')")
	f.StringArrayVar(&outputs, "output", nil, "absolute path in the sandbox kept as an artifact when it ends, however it ends (repeatable; see `sandbox artifacts`)")
	f.StringArrayVar(&lockfiles, "lockfile", nil, "restrict package installs to the versions this lockfile lists, with its digests: package-lock.json or npm-shrinkwrap.json, requirements*.txt with --hash, uv.lock or poetry.lock (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	return cmd
}

func sandboxExecCmd() *cobra.Command {
	var (
		cwd, user string
		env       []string
		timeout   time.Duration
		stdin, bg bool
		tty       bool
	)
	cmd := &cobra.Command{
		Use:   "exec [flags] ID -- CMD [ARG...]",
		Short: "Run a command in a sandbox, streaming its output; exits with its status (124 when it timed out)",
		Long: `Run a command in a sandbox, streaming its output; exits with its status
(124 when it timed out).
With --background it returns once the command started and prints its exec
id, for 'airlock sandbox ps|attach|kill'. With -it it runs on a terminal.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return fmt.Errorf("usage: airlock sandbox exec ID -- CMD [ARG...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if tty {
				if bg {
					return usagef("--tty and --background: attach to a terminal session is not supported; drop one")
				}
				return execTTY(cmd, args[0], client.ExecRequest{Argv: args[1:], Cwd: cwd, User: user, Timeout: client.Duration(timeout)}, env, stdin)
			}
			req := client.ExecRequest{Argv: args[1:], Cwd: cwd, User: user, Timeout: client.Duration(timeout), Background: bg}
			if bg && stdin {
				return usagef("--background and --stdin: a background command takes no stdin")
			}
			var err error
			if req.Env, err = clifront.KeyValues("--env", env); err != nil {
				return err
			}
			if stdin {
				if req.Stdin, err = clifront.ReadStdin(os.Stdin); err != nil {
					return err
				}
			}
			ctx, cancel := signalContext()
			defer cancel()
			res, err := apiClient().Exec(ctx, args[0], req, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if bg {
				fmt.Fprintln(cmd.OutOrStdout(), res.ID)
				return nil
			}
			return exitFor(cmd.ErrOrStderr(), res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cwd, "cwd", "", "working directory (default /workspace)")
	f.StringVarP(&user, "user", "u", "", "run as this user of the sandbox: name, uid or uid:gid (default root)")
	f.StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE added to the environment (repeatable)")
	f.DurationVar(&timeout, "timeout", 0, "kill the command (and everything it started) after this long")
	f.BoolVarP(&stdin, "stdin", "i", false, "pass this process's stdin to the command (up to 12 MiB; with -t: interactive)")
	f.BoolVarP(&tty, "tty", "t", false, "run on a terminal (with -i: an interactive session, e.g. -it ID -- bash)")
	f.BoolVar(&bg, "background", false, "start the command and print its exec id; it runs on after this returns")
	return cmd
}

func sandboxLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes",
		Long: `List the sandboxes the caller may see (an admin: all), oldest first. STATE
is creating, running, paused or ending (docs/api.md, "Sandbox states"); an
ended sandbox is gone from the list: 'airlock sandbox artifacts ID' shows what
it left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			sbs, err := apiClient().List(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), sbs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tPOLICY\tADDRESS\tAGE\tIMAGE\tOWNER\tLIFETIME LEFT")
			for _, sb := range sbs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.State, sb.Policy, sb.Address,
					time.Since(sb.Created).Round(time.Second), sb.Image, dashIf(sb.Owner), lifetimeLeft(sb.Deadline))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func sandboxDiffCmd() *cobra.Command {
	var patch, asJSON bool
	cmd := &cobra.Command{
		Use:   "diff ID",
		Short: "Show what changed under /workspace since the sandbox was created",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			d, err := apiClient().Diff(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), d)
			}
			out := cmd.OutOrStdout()
			if len(d.Changes) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "airlock: no changes under /workspace")
			}
			for _, c := range d.Changes {
				fmt.Fprintf(out, "%s %s\n", map[string]string{"added": "A", "modified": "M", "deleted": "D"}[c.Change], c.Path)
			}
			if patch && d.Patch != "" {
				fmt.Fprintln(out)
				fmt.Fprint(out, d.Patch)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&patch, "patch", false, "also print the unified diff of text files")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func sandboxSimpleCmd(name, short string, f func(*client.Client, context.Context, string) error, past string) *cobra.Command {
	return &cobra.Command{
		Use:   name + " ID...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			c := apiClient()
			var failed bool
			for _, id := range args {
				if err := f(c, ctx, id); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "airlock: %s %s: %v\n", name, id, err)
					failed = true
					continue
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "airlock: %s %s\n", past, id)
			}
			if failed {
				return exitError{1}
			}
			return nil
		},
	}
}

func sandboxSnapshotCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot ID",
		Short: "Commit a sandbox to a local image tagged with its id (it keeps running)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			done := progress(cmd.ErrOrStderr(), "committing sandbox "+args[0])
			s, err := apiClient().Snapshot(ctx, args[0])
			done(err)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "airlock: warning:", s.Warning)
			fmt.Fprintln(cmd.OutOrStdout(), s.Image)
			return nil
		},
	}
}

// splitRemote parses "ID:/path"; ok is false for a host path.
func splitRemote(s string) (id, path string, ok bool) {
	id, path, ok = strings.Cut(s, ":")
	if !ok || id == "" || !strings.HasPrefix(path, "/") || strings.ContainsAny(id, "/.") {
		return "", "", false
	}
	return id, path, true
}

func dashIf(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// lifetimeLeft is the time until deadline, "-" for none.
func lifetimeLeft(deadline time.Time) string {
	if deadline.IsZero() {
		return "-"
	}
	return max(time.Until(deadline), 0).Round(time.Second).String()
}
