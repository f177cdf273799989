//go:build !airlock_thin

package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"airlock/certs"
)

func init() { rootCmd.AddCommand(newCACmd()) }

// newCACmd builds `airlock ca`: export and rotate the appliance CA.
func newCACmd() *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Create, show or rotate the appliance certificate authority",
		Long: `The appliance CA signs the certificates the proxy presents when it inspects
TLS. 'airlock ca init' (or the first start of 'airlock serve') creates it in
the state directory (ca.key, mode 0600; ca.crt). Sandboxes trust its
certificate; the key never leaves the appliance. 'export' and 'rotate' need
an existing CA: a mistyped --state-dir is an error, never a new CA.`,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVar(&stateDir, "state-dir", defaultStateDir, "state directory holding "+certs.KeyFile+" and "+certs.CertFile)

	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the CA in the state directory and print its certificate (PEM)",
		Long: `Create a new CA key and certificate in the state directory (created 0700 if
absent) and print the certificate. An existing CA is never replaced: use
'airlock ca rotate' for that.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := certs.Create(stateDir)
			if err != nil {
				return caError(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock: CA created in %s\n", stateDir)
			_, err = cmd.OutOrStdout().Write(ca.CertPEM())
			return err
		},
	}
	export := &cobra.Command{
		Use:   "export",
		Short: "Print the CA certificate (PEM) for clients to trust",
		Long: `Print the appliance CA certificate in PEM form on standard output, to install
in clients outside sandboxes that use the explicit proxy. The CA must exist
('airlock ca init' or a first 'airlock serve' creates it); export never
creates one. The private key is never printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := certs.Load(stateDir)
			if err != nil {
				return caError(err)
			}
			_, err = cmd.OutOrStdout().Write(ca.CertPEM())
			return err
		},
	}
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Replace the CA with a new key and certificate",
		Long: `Generate a new CA key and certificate in the state directory, replacing the
existing ones (a state directory without a CA is an error), and print the new certificate (PEM). A running 'airlock serve' keeps
the CA it loaded until restarted; sandboxes started afterwards get the new
trust bundle. Clients outside sandboxes must import the new certificate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := certs.Load(stateDir)
			if err != nil {
				return caError(err)
			}
			if err := ca.Rotate(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock: CA rotated in %s\n", stateDir)
			_, err = cmd.OutOrStdout().Write(ca.CertPEM())
			return err
		},
	}
	cmd.AddCommand(initCmd, export, rotate)
	return cmd
}

// caError adds the next step to a missing or existing CA.
func caError(err error) error {
	switch {
	case errors.Is(err, certs.ErrNoCA):
		return fmt.Errorf("%w: check --state-dir, or create one with 'airlock ca init'", err)
	case errors.Is(err, certs.ErrCAExists):
		return fmt.Errorf("%w: 'airlock ca rotate' replaces it", err)
	}
	return err
}
