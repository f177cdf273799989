package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"airlock/client"
	"airlock/internal/clifront"
)

var runFlags struct {
	policy    string
	workspace string
	timeout   time.Duration
	keep      bool
	env       []string
	secrets   []string
	quiet     bool
	copyWS    bool
	gitURL    string
	template  string
	lockfiles []string
}

var runCmd = &cobra.Command{
	Use:   "run [--policy P] [--workspace DIR] [--timeout D] [--keep] (IMAGE | --template NAME[:vN]) -- CMD...",
	Short: "Run one command in a new sandbox and summarize its egress",
	Long: `Create a sandbox from IMAGE, or from a template version with --template
(` + "`airlock template build`" + `; a warm pool of it in the appliance's [pool] makes
the create a claim of a sandbox started ahead of demand), under a policy, run
CMD in it with its output streamed here, then print the egress summary
(destinations by category, denied attempts with the rule that denied them,
DNS names) and how to get the review report. The sandbox is removed
afterwards unless --keep.

The exit status is the command's (124 when it timed out); 2 for a usage
error, such as both IMAGE and --template, or neither.`,
	Example: `  airlock run --policy coding-agent localhost/airlock/debian:12 -- curl -sS https://git.example.test/
  airlock run --template py --policy coding-agent -- python3 -c 'import requests'
  airlock run --template py:v2 --copy-workspace -w "$PWD" -- python3 main.py
  airlock run --workspace "$PWD" --timeout 10m localhost/airlock/busybox:1 -- sh -c 'ls /workspace'
  airlock run --workspace-git https://git.example.test/org/repo.git localhost/airlock/debian:12 -- git -C /workspace log -1
  airlock run --lockfile package-lock.json -w "$PWD" --copy-workspace localhost/airlock/debian:12 -- npm ci`,
	Args: runArgs,
	RunE: runRun,
}

// runArgs checks the command line: IMAGE (or --template) before --, and
// a command after it.
func runArgs(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	tmpl := runFlags.template
	switch {
	case dash < 0 || len(args) <= dash:
		return fmt.Errorf("usage: airlock run [flags] (IMAGE | --template NAME[:vN]) -- CMD [ARG...] (put the command after --)")
	case dash > 1:
		return fmt.Errorf("more than one argument before --: %q (give one IMAGE, or --template NAME[:vN]; the command goes after --)", args[:dash])
	case dash == 1 && tmpl != "":
		return fmt.Errorf("IMAGE %s and --template %s exclude each other: give one (a template names its image)", args[0], tmpl)
	case dash == 0 && tmpl == "":
		return fmt.Errorf("no IMAGE and no --template: give IMAGE or --template NAME[:vN] before --")
	}
	return nil
}

func init() {
	f := runCmd.Flags()
	f.StringVarP(&runFlags.policy, "policy", "p", "", "policy name (default: the appliance's default_policy)")
	f.StringVarP(&runFlags.workspace, "workspace", "w", "", "host directory bind-mounted at /workspace (on the appliance's host; an admin's, and on the socket one you own or root)")
	f.DurationVarP(&runFlags.timeout, "timeout", "t", 0, "kill the command after this long (default: the appliance's exec_timeout)")
	f.BoolVar(&runFlags.keep, "keep", false, "keep the sandbox after the command ends")
	f.BoolVar(&runFlags.copyWS, "copy-workspace", false, "copy the workspace in instead of mounting it (the host directory stays untouched)")
	f.StringVar(&runFlags.gitURL, "workspace-git", "", "https URL cloned into /workspace (git clone --depth 1) from inside the sandbox, through the proxy, as the first setup step; the image needs git")
	f.StringArrayVarP(&runFlags.env, "env", "e", nil, "KEY=VALUE in the sandbox's environment (repeatable)")
	f.StringArrayVar(&runFlags.secrets, "secret", nil, "NAME=VALUE task secret held by the appliance for proxy injection, never put in the sandbox (repeatable)")
	f.BoolVarP(&runFlags.quiet, "quiet", "q", false, "no progress lines and no summary")
	f.StringVar(&runFlags.template, "template", "", "start from a template version, NAME (the newest) or NAME:vN, instead of IMAGE (see 'airlock template')")
	f.StringArrayVar(&runFlags.lockfiles, "lockfile", nil, "restrict package installs to the versions this lockfile lists, with its digests: package-lock.json or npm-shrinkwrap.json, requirements*.txt with --hash, uv.lock or poetry.lock (repeatable)")
	addSocketFlag(runCmd)
	rootCmd.AddCommand(runCmd)
}

func runRun(cmd *cobra.Command, args []string) error {
	image, argv := "", args[cmd.ArgsLenAtDash():]
	if cmd.ArgsLenAtDash() == 1 {
		image = args[0]
	}
	req, err := createRequest(image, runFlags.policy, runFlags.workspace, runFlags.env, runFlags.secrets)
	if err != nil {
		return err
	}
	req.Template = runFlags.template
	if req.Lockfiles, err = readLockfiles(runFlags.lockfiles); err != nil {
		return err
	}
	if runFlags.copyWS {
		req.WorkspaceMode = "copy"
	}
	if err := setWorkspaceGit(&req, runFlags.gitURL); err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	c := apiClient()
	info := cmd.ErrOrStderr()
	if runFlags.quiet {
		info = io.Discard
	}
	from := image
	if req.Template != "" {
		from = "template " + req.Template
	}
	done := progress(info, createStep("creating sandbox from "+from, req))
	sb, err := c.Create(ctx, req)
	done(err)
	if err != nil {
		if req.Template != "" {
			return err // the appliance names the template and `airlock template ls`
		}
		return explainCreate(err, image)
	}
	if sb.Template != "" {
		fmt.Fprintf(info, "airlock: sandbox %s (template %s, policy %s, address %s)\n", sb.ID, sb.Template, sb.Policy, sb.Address)
	} else {
		fmt.Fprintf(info, "airlock: sandbox %s (policy %s, address %s)\n", sb.ID, sb.Policy, sb.Address)
	}
	res, execErr := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: argv, Timeout: client.Duration(runFlags.timeout)},
		cmd.OutOrStdout(), cmd.ErrOrStderr())
	// Summary and cleanup still happen after Ctrl-C: use a fresh context.
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer ccancel()
	if !runFlags.quiet {
		if s, err := c.Summary(cctx, sb.ID); err == nil {
			printSummary(info, sb, s)
		}
	}
	if runFlags.keep {
		fmt.Fprintf(info, "airlock: sandbox %s kept; remove it with `airlock sandbox rm %s`\n", sb.ID, sb.ID)
	} else {
		done := progress(info, "removing sandbox "+sb.ID)
		err := c.Delete(cctx, sb.ID)
		done(err)
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock: remove sandbox %s: %v\n", sb.ID, err)
		}
	}
	if execErr != nil {
		return fmt.Errorf("run in sandbox %s: %w", sb.ID, execErr)
	}
	return exitFor(info, res)
}

// exitFor turns a command's result into the CLI's exit status: 124 when
// its timeout ended it (as timeout(1)), else its own (a signal's as a
// shell reports it, 128+N), saying which limit ended it.
func exitFor(info io.Writer, res client.ExecResult) error {
	if code := clifront.ExitStatus(info, res); code != 0 {
		return exitError{code}
	}
	return nil
}

func createRequest(image, policy, workspace string, env, secrets []string) (client.CreateRequest, error) {
	req := client.CreateRequest{Image: image, Policy: policy}
	if workspace != "" {
		abs, err := filepath.Abs(workspace)
		if err != nil {
			return req, err
		}
		st, err := os.Stat(abs)
		if err != nil || !st.IsDir() {
			return req, fmt.Errorf("--workspace %s: not a directory", workspace)
		}
		req.Workspace = abs
	}
	var err error
	if req.Env, err = clifront.KeyValues("--env", env); err != nil {
		return req, err
	}
	req.Secrets, err = clifront.KeyValues("--secret", secrets)
	return req, err
}

// setWorkspaceGit sets the URL to clone into /workspace, checked here so
// a bad one fails before anything is created (the appliance checks again).
func setWorkspaceGit(req *client.CreateRequest, url string) error {
	if url == "" {
		return nil
	}
	if req.Workspace != "" {
		return fmt.Errorf("--workspace and --workspace-git exclude each other: give a host directory or a URL")
	}
	if err := client.ValidateGitURL(url); err != nil {
		return fmt.Errorf("--workspace-git: %w", err)
	}
	req.WorkspaceGit = url
	return nil
}

// createStep is the progress line of a create: a clone can take a while.
func createStep(msg string, req client.CreateRequest) string {
	if req.WorkspaceGit != "" {
		msg += fmt.Sprintf(" and cloning %s into /workspace through the proxy", req.WorkspaceGit)
	}
	return msg
}

func explainCreate(err error, image string) error {
	if client.IsCode(err, client.CodeNotFound) || strings.Contains(err.Error(), "image") && strings.Contains(err.Error(), "not found") {
		return fmt.Errorf("%w\n(is %s imported for the sandbox user? `make image` builds localhost/airlock/busybox:1 and localhost/airlock/debian:12)", err, image)
	}
	return err
}

// printSummary writes the egress summary of a finished run.
func printSummary(w io.Writer, sb client.Sandbox, s client.Summary) {
	fmt.Fprintf(w, "\nairlock: egress of sandbox %s (policy %s)\n", sb.ID, sb.Policy)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if len(s.Categories) == 0 {
		fmt.Fprintln(tw, "  allowed:\tnone")
	} else {
		fmt.Fprintln(tw, "  allowed:")
	}
	for _, c := range s.Categories {
		fmt.Fprintf(tw, "    %s\t%d\t%s\n", c.Category, c.Requests, strings.Join(c.Destinations, ", "))
	}
	if len(s.Denied) == 0 {
		fmt.Fprintln(tw, "  denied:\tnone")
	} else {
		fmt.Fprintln(tw, "  denied:")
	}
	for _, d := range s.Denied {
		fmt.Fprintf(tw, "    %s\t%s\t%dx\trule %s\t%s\n", d.Kind, d.Destination, d.Count, d.Rule, d.Reason)
	}
	tw.Flush()
	if len(s.DNSNames) > 0 {
		fmt.Fprintf(w, "  dns names: %s\n", strings.Join(s.DNSNames, ", "))
	}
	if s.Drops > 0 {
		fmt.Fprintf(w, "  kernel drops: %d packets (see `airlock logs --sandbox %s --kind drop`)\n", s.Drops, sb.ID)
	}
	fmt.Fprintf(w, "  review report: %s --html report-%s.html\n", s.Report, sb.ID)
}
