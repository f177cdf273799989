package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"airlock/client"
)

// socketFlag is the control socket for every client command; it defaults
// to AIRLOCK_SOCKET, then client.DefaultSocket.
var socketFlag string

// addSocketFlag gives a client command the --socket flag.
func addSocketFlag(cmd *cobra.Command) {
	cmd.Flags().StringVar(&socketFlag, "socket", "", "control socket of airlock serve (default $AIRLOCK_SOCKET or "+client.DefaultSocket+")")
}

func apiClient() *client.Client {
	if socketFlag != "" {
		return client.New(socketFlag)
	}
	return client.FromEnv()
}

// progress prints "msg..." to w and returns a func that ends the line
// with the elapsed time; for steps that take a while.
func progress(w io.Writer, msg string) func(err error) {
	start := time.Now()
	fmt.Fprintf(w, "airlock: %s...", msg)
	return func(err error) {
		if err != nil {
			fmt.Fprintln(w, " failed")
			return
		}
		fmt.Fprintf(w, " done (%s)\n", time.Since(start).Round(time.Millisecond))
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// signalContext is cancelled by SIGINT/SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
