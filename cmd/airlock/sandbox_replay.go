//go:build !airlock_thin

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"airlock/audit"
	"airlock/client"
)

// replayStep is one recorded command of a sandbox and, once replayed, the
// new run's outcome, both as the audit store recorded them.
type replayStep struct {
	argv      []string
	cwd, user string
	old, new  *audit.Exec
}

// origin is what a sandbox came from: the template version or image, and
// its policy, from its lifecycle records.
type origin struct {
	image, imageID, template, policy string
}

func sandboxReplayCmd() *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "replay ID",
		Short: "Re-run a sandbox's recorded commands, in order, in a fresh sandbox, and compare",
		Long: `Replay reads sandbox ID's exec records from the audit store (the sandbox may
be gone), creates a fresh sandbox from the same template version (or image)
under the same policy, runs each recorded command again with its cwd and
user, and prints each command's old and new exit code, duration and output
digest (sha256 of the recorded stdout head and tail). A command whose exit
code or output digest differs is flagged CHANGED. Then the egress that
differs (as "airlock policy replay" reads requests): each DNS question,
connection or HTTP request that only one run made, or that the two runs
made with another outcome (allowed, denied, ask). The exit status is 1 when
a command or the egress differs. Background commands are not replayed. The fresh sandbox is removed unless
--keep.`,
		Example: `  airlock sandbox replay 3f9c2a1b7e40
  airlock sandbox replay --keep 3f9c2a1b7e40`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return replay(ctx, apiClient(), args[0], keep, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the fresh sandbox (its id is printed)")
	return cmd
}

func replay(ctx context.Context, c *client.Client, id string, keep bool, out, errw io.Writer) error {
	o, steps, err := recorded(ctx, c, id)
	if err != nil {
		return err
	}
	req := client.CreateRequest{Policy: o.policy, Image: o.image, Template: o.template}
	if o.template != "" {
		req.Image = ""
	}
	sb, err := c.Create(ctx, req)
	if err != nil {
		return fmt.Errorf("replay %s: create the fresh sandbox: %w", id, err)
	}
	fmt.Fprintf(errw, "airlock: replaying %d command(s) of %s in %s (%s, policy %s)\n", len(steps), id, sb.ID, describeOrigin(o), o.policy)
	if sb.ImageID != "" && o.imageID != "" && sb.ImageID != o.imageID {
		fmt.Fprintf(errw, "airlock: warning: the fresh sandbox runs image %s, the recorded one ran %s\n", sb.ImageID, o.imageID)
	}
	if !keep {
		defer c.Delete(context.WithoutCancel(ctx), sb.ID)
	}
	for i := range steps {
		s := &steps[i]
		if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: s.argv, Cwd: s.cwd, User: s.user}, io.Discard, io.Discard); err != nil {
			return fmt.Errorf("replay %s: command %d %q: %w", id, i+1, s.argv, err)
		}
	}
	if err := fillNew(ctx, c, sb.ID, steps); err != nil {
		return err
	}
	if keep {
		fmt.Fprintf(errw, "airlock: kept sandbox %s\n", sb.ID)
	}
	oldG, err := egressOf(ctx, c, id)
	if err != nil {
		return err
	}
	newG, err := egressOf(ctx, c, sb.ID)
	if err != nil {
		return err
	}
	if printCommandReplay(out, steps)+printEgressReplay(out, oldG, newG) > 0 {
		return exitError{1}
	}
	return nil
}

// recorded reads a sandbox's origin and its finished foreground commands.
func recorded(ctx context.Context, c *client.Client, id string) (origin, []replayStep, error) {
	var o origin
	var steps []replayStep
	err := c.Logs(ctx, client.LogQuery{Sandbox: id}, func(e audit.Event) error {
		switch {
		case e.Lifecycle != nil:
			l := e.Lifecycle
			o.image, o.policy = cmpStr(o.image, l.Image), cmpStr(o.policy, l.Policy)
			o.imageID, o.template = cmpStr(o.imageID, l.ImageID), cmpStr(o.template, l.Template)
		case e.Exec != nil && e.Exec.Stage == "finished" && !e.Exec.Background && !e.Exec.TTY && len(e.Exec.Argv) > 0:
			steps = append(steps, replayStep{argv: e.Exec.Argv, cwd: e.Exec.Cwd, user: e.Exec.User, old: e.Exec})
		}
		return nil
	})
	switch {
	case err != nil:
		return o, nil, fmt.Errorf("replay %s: read its records: %w", id, err)
	case o.policy == "" || o.image == "" && o.template == "":
		return o, nil, fmt.Errorf("replay %s: no lifecycle record names its image and policy (is the id right?)", id)
	case len(steps) == 0:
		return o, nil, fmt.Errorf("replay %s: it ran no command to replay", id)
	}
	return o, steps, nil
}

// fillNew reads the fresh sandbox's exec records, so old and new outputs
// are compared in the same (recorded, redacted) form.
func fillNew(ctx context.Context, c *client.Client, id string, steps []replayStep) error {
	i := 0
	err := c.Logs(ctx, client.LogQuery{Sandbox: id, Kind: audit.KindExec}, func(e audit.Event) error {
		if e.Exec.Stage == "finished" && i < len(steps) {
			steps[i].new = e.Exec
			i++
		}
		return nil
	})
	if err == nil && i < len(steps) {
		err = fmt.Errorf("%d of %d records", i, len(steps))
	}
	if err != nil {
		return fmt.Errorf("replay: read the fresh sandbox's records: %w", err)
	}
	return nil
}

// printCommandReplay prints the comparison and returns how many changed.
func printCommandReplay(w io.Writer, steps []replayStep) int {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tCOMMAND\tEXIT (OLD → NEW)\tDURATION (OLD → NEW)\tOUTPUT (OLD → NEW)\t")
	changed := 0
	for i, s := range steps {
		mark := ""
		if exitOf(s.old) != exitOf(s.new) || digest(s.old) != digest(s.new) {
			mark, changed = "CHANGED", changed+1
		}
		fmt.Fprintf(tw, "%d\t%s\t%s → %s\t%s → %s\t%s → %s\t%s\n", i+1, shortCmd(s.argv), exitOf(s.old), exitOf(s.new),
			ms(s.old.DurationMS), ms(s.new.DurationMS), digest(s.old), digest(s.new), mark)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d command(s), %d changed\n", len(steps), changed)
	return changed
}

func exitOf(x *audit.Exec) string {
	switch {
	case x.TimedOut:
		return "timeout"
	case x.Signal != "":
		return "signal " + x.Signal
	case x.ExitCode == nil:
		return "?"
	}
	return fmt.Sprint(*x.ExitCode)
}

// digest is the first 12 hex digits of sha256 over the recorded stdout
// head and tail (and the byte count).
func digest(x *audit.Exec) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%d\x00%s\x00%s", x.StdoutBytes, x.StdoutHead, x.StdoutTail)))
	return hex.EncodeToString(h[:6])
}

func ms(n int64) string { return (time.Duration(n) * time.Millisecond).String() }

func shortCmd(argv []string) string {
	s := strings.Join(argv, " ")
	if len(s) > 48 {
		s = s[:45] + "..."
	}
	return s
}

func describeOrigin(o origin) string {
	if o.template != "" {
		return "template " + o.template
	}
	return "image " + o.image
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
