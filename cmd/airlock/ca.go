package main

import (
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
		Short: "Show or rotate the appliance certificate authority",
		Long: `The appliance CA signs the certificates the proxy presents when it inspects
TLS. It is created on first start in the state directory (ca.key, mode 0600;
ca.crt). Sandboxes trust its certificate; the key never leaves the appliance.`,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVar(&stateDir, "state-dir", defaultStateDir, "state directory holding "+certs.KeyFile+" and "+certs.CertFile)

	export := &cobra.Command{
		Use:   "export",
		Short: "Print the CA certificate (PEM) for clients to trust",
		Long: `Print the appliance CA certificate in PEM form on standard output, to install
in clients outside sandboxes that use the explicit proxy. The CA is created if
the state directory has none yet. The private key is never printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := certs.Open(stateDir)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(ca.CertPEM())
			return err
		},
	}
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Replace the CA with a new key and certificate",
		Long: `Generate a new CA key and certificate in the state directory, replacing the
old ones, and print the new certificate (PEM). A running 'airlock serve' keeps
the CA it loaded until restarted; sandboxes started afterwards get the new
trust bundle. Clients outside sandboxes must import the new certificate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := certs.Rotate(stateDir)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "airlock: CA rotated in %s\n", stateDir)
			_, err = cmd.OutOrStdout().Write(ca.CertPEM())
			return err
		},
	}
	cmd.AddCommand(export, rotate)
	return cmd
}
