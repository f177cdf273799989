package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"airlock/client"
)

// socketFlag is the control socket for every client command; it defaults
// to AIRLOCK_SOCKET, then client.DefaultSocket.
var socketFlag string

// remoteFlags reach an appliance's TCP listener (TLS) instead of the
// socket; the token comes from AIRLOCK_TOKEN or --token-file, never from
// the command line (it would show in ps).
var remoteFlags struct {
	url, tokenFile, caFile, fingerprint string
}

// addSocketFlag gives a client command the --socket flag and the flags of
// a remote appliance (--url, --token-file, --ca-file, --fingerprint).
func addSocketFlag(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&socketFlag, "socket", "", "control socket of airlock serve (default $AIRLOCK_SOCKET or "+client.DefaultSocket+")")
	f.StringVar(&remoteFlags.url, "url", "", "a remote appliance, https://HOST:PORT (default $AIRLOCK_URL), e.g. --url https://appliance.example.test:7443")
	f.StringVar(&remoteFlags.tokenFile, "token-file", "", "file holding the principal's bearer token (default $AIRLOCK_TOKEN)")
	f.StringVar(&remoteFlags.caFile, "ca-file", "", "PEM roots to verify the appliance by, e.g. from 'airlock ca export' (default $AIRLOCK_CA_FILE)")
	f.StringVar(&remoteFlags.fingerprint, "fingerprint", "", "pin the appliance's certificate or CA by its SHA-256, as airlock serve logs it (default $AIRLOCK_FINGERPRINT)")
}

func apiClient() *client.Client {
	if remoteFlags.url != "" {
		return remoteClient()
	}
	if socketFlag != "" {
		return client.New(socketFlag)
	}
	return client.FromEnv()
}

// remoteClient is a client of --url; a bad setting fails its first call.
func remoteClient() *client.Client {
	tok := os.Getenv(client.EnvToken)
	if remoteFlags.tokenFile != "" {
		b, err := os.ReadFile(remoteFlags.tokenFile)
		if err != nil {
			return client.Failing(fmt.Errorf("--token-file: %w", err))
		}
		tok = strings.TrimSpace(string(b))
	}
	o := client.TLSOptions{CAFile: firstSet(remoteFlags.caFile, os.Getenv(client.EnvCAFile)),
		Fingerprint: firstSet(remoteFlags.fingerprint, os.Getenv(client.EnvFingerprint))}
	c, err := client.NewRemote(remoteFlags.url, tok, o)
	if err != nil {
		return client.Failing(fmt.Errorf("--url: %w", err))
	}
	return c
}

func firstSet(a, b string) string {
	if a != "" {
		return a
	}
	return b
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
