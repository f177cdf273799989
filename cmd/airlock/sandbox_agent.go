package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func sandboxPsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ps ID",
		Short: "List a sandbox's commands (running, and just finished)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			ps, err := apiClient().Processes(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), ps)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "EXEC ID\tPID\tSTATE\tSTARTED\tCOMMAND")
			for _, p := range ps {
				state := "running"
				switch {
				case p.Running:
				case p.Signal != "":
					state = "signal " + p.Signal
				case p.ExitCode != nil:
					state = "exit " + strconv.Itoa(*p.ExitCode)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", p.ID, p.Pid, state, p.Started.Local().Format(time.TimeOnly), strings.Join(p.Argv, " "))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func sandboxKillCmd() *cobra.Command {
	var sig string
	cmd := &cobra.Command{
		Use:   "kill ID EXEC_ID",
		Short: "End a command and everything it started (or send it --signal)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			if sig != "" {
				return apiClient().Signal(ctx, args[0], args[1], sig)
			}
			return apiClient().Kill(ctx, args[0], args[1])
		},
	}
	cmd.Flags().StringVarP(&sig, "signal", "s", "", "send this signal (TERM, HUP, 9, ...) to the command instead of ending its tree")
	return cmd
}

func sandboxAttachCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "attach ID EXEC_ID",
		Short: "Follow a command's output (its last 512 KiB, then live); Ctrl-C detaches",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			res, err := apiClient().Attach(ctx, args[0], args[1], cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				if ctx.Err() != nil {
					return nil // detached
				}
				return err
			}
			return exitFor(cmd.ErrOrStderr(), res)
		},
	}
}

func sandboxFilesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "files",
		Short: "Read, write, list and remove single files in a sandbox (through its agent)",
	}
	var mode string
	write := &cobra.Command{
		Use:   "write ID PATH [LOCAL]",
		Short: "Write PATH atomically from LOCAL (default stdin)",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			var m uint64
			if mode != "" {
				var err error
				if m, err = strconv.ParseUint(mode, 8, 32); err != nil {
					return usagef("--mode %q: want octal bits like 0644", mode)
				}
			}
			var src io.Reader
			var size int64
			if len(args) == 3 {
				f, err := os.Open(args[2])
				if err != nil {
					return err
				}
				defer f.Close()
				st, err := f.Stat()
				if err != nil {
					return err
				}
				src, size = f, st.Size()
			} else {
				b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<30))
				if err != nil {
					return fmt.Errorf("read stdin: %w", err)
				}
				src, size = bytes.NewReader(b), int64(len(b))
			}
			ctx, cancel := signalContext()
			defer cancel()
			_, err := apiClient().WriteFile(ctx, args[0], args[1], uint32(m), size, src)
			return err
		},
	}
	write.Flags().StringVar(&mode, "mode", "", "permission bits in octal (default 0644)")
	read := &cobra.Command{
		Use:   "read ID PATH",
		Short: "Print a file of the sandbox",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			_, err := apiClient().ReadFile(ctx, args[0], args[1], cmd.OutOrStdout())
			return err
		},
	}
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls ID PATH",
		Short: "List a directory of the sandbox",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			fs, err := apiClient().ListDir(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), fs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			for _, f := range fs {
				name := f.Name
				if f.Symlink != "" {
					name += " -> " + f.Symlink
				}
				fmt.Fprintf(tw, "%s\t%04o\t%d:%d\t%d\t%s\t%s\n", f.Type, f.Mode, f.UID, f.GID, f.Size, f.ModTime.Local().Format(time.DateTime), name)
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	var recursive bool
	rm := &cobra.Command{
		Use:   "rm ID PATH",
		Short: "Remove a file or empty directory (-r: a tree; symlinks are never followed)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return apiClient().Remove(ctx, args[0], args[1], recursive)
		},
	}
	rm.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a directory and everything in it")
	var parents bool
	mkdir := &cobra.Command{
		Use:   "mkdir ID PATH",
		Short: "Make a directory (-p: with its parents)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			return apiClient().Mkdir(ctx, args[0], args[1], parents)
		},
	}
	mkdir.Flags().BoolVarP(&parents, "parents", "p", false, "make missing parents too")
	cmd.AddCommand(read, write, ls, rm, mkdir)
	for _, c := range cmd.Commands() {
		addSocketFlag(c)
	}
	return cmd
}
