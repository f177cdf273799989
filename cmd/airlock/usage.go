package main

import (
	"fmt"
	"sync"

	"github.com/spf13/cobra"
)

// usageError is a mistake in how a command was called (an unknown command
// or flag, a wrong number of arguments, a malformed argument): exit status
// 2, distinct from 1, "the command ran and found a problem" (a policy that
// does not load, a test that fails, a denial with --exit-code).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

var markUsageOnce sync.Once

// markUsageErrors makes every flag and argument error of every command
// under root a usageError, and an unknown subcommand one too. It runs once,
// after every init has added its commands.
func markUsageErrors(root *cobra.Command) {
	markUsageOnce.Do(func() {
		root.InitDefaultHelpCmd() // cobra adds these during Execute; mark them too
		root.InitDefaultCompletionCmd()
		root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
		walkCommands(root, markCommand)
	})
}

func walkCommands(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walkCommands(sub, f)
	}
}

func markCommand(c *cobra.Command) {
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = cobra.ArbitraryArgs // groupRun names an unknown subcommand
		c.RunE = groupRun
		return
	}
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	if c.Runnable() {
		wrapPreRun(c)
	}
}

// wrapPreRun checks required and grouped flags before the command's own
// PreRun (cobra checks them after it, as plain errors).
func wrapPreRun(c *cobra.Command) {
	prev, prevE := c.PreRun, c.PreRunE
	c.PreRun = nil
	c.PreRunE = func(cmd *cobra.Command, args []string) error {
		if err := cmd.ValidateRequiredFlags(); err != nil {
			return usageError{err}
		}
		if err := cmd.ValidateFlagGroups(); err != nil {
			return usageError{err}
		}
		if prevE != nil {
			return prevE(cmd, args)
		}
		if prev != nil {
			prev(cmd, args)
		}
		return nil
	}
}

// groupRun runs a command that only groups subcommands: alone it prints
// its help; with an argument that names no subcommand it is a usage error.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usagef("%s", msg)
}
