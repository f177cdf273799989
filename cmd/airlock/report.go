//go:build !airlock_thin

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"airlock/audit"
)

func newReportCmd() *cobra.Command {
	var f logFilter
	var htmlFile string
	var md bool
	cmd := &cobra.Command{
		Use:   "report SANDBOX",
		Short: "Write the review report of one sandbox (Markdown, or self-contained HTML)",
		Long: `Gather everything recorded about one sandbox into one page for a reviewer:
the sandbox (image, policy and its hash, times, exit status), denials first
with the rule and reason, would-be denials in audit mode, the timeline of
commands with exit codes and durations, allowed traffic by category with
counts and bytes, DNS names, kernel drops, secrets injected (names only),
packages fetched, files changed, and the hash-chain anchor.

  airlock report sb-1                    Markdown on stdout
  airlock report sb-1 --md > sb-1.md
  airlock report sb-1 --html sb-1.html   one self-contained, printable HTML file
  airlock report sb-1 --html -           HTML on stdout`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if md && htmlFile != "" {
				return usagef("--md and --html exclude each other")
			}
			return runReport(cmd.Context(), cmd.OutOrStdout(), &f, args[0], htmlFile)
		},
	}
	f.addStateDir(cmd.Flags())
	cmd.Flags().StringVar(&htmlFile, "html", "", "write HTML to this file ('-' for stdout)")
	cmd.Flags().BoolVar(&md, "md", false, "write Markdown to stdout (the default)")
	return cmd
}

func init() { rootCmd.AddCommand(newReportCmd()) }

func runReport(ctx context.Context, out io.Writer, f *logFilter, sandbox, htmlFile string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	st, err := f.open()
	if err != nil {
		return err
	}
	defer st.Close()
	r, err := audit.BuildReport(ctx, st, sandbox)
	if err != nil {
		return err
	}
	switch htmlFile {
	case "":
		return r.Markdown(out)
	case "-":
		return r.HTML(out)
	}
	return writeFileAtomic(htmlFile, r.HTML)
}

// writeFileAtomic writes through a temporary file renamed into place, so a
// failed render never leaves half a report.
func writeFileAtomic(path string, render func(io.Writer) error) error {
	tmp, err := os.CreateTemp(dirOf(path), ".report-*")
	if err != nil {
		// Name the path the user gave, not the temporary file.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := render(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("report: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("report: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

func dirOf(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			return path[:i+1]
		}
	}
	return "."
}
