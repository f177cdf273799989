//go:build !airlock_thin

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"airlock/serve"
)

var principalFlags struct {
	file, config string
	scopes       []string
	sandboxes    int
	maxLifetime  time.Duration
	maxExec      time.Duration
	policies     []string
	images       []string
	noReload     bool
}

var principalCmd = &cobra.Command{
	Use:   "principal",
	Short: "Manage the callers of the control API's TCP listener (principals, tokens, scopes, quotas)",
	Long: `A principal is a caller of the control API over TCP (TLS): a name, the
SHA-256 of its bearer token, its scopes (` + strings.Join(serve.AllScopes, ", ") + `)
and its quota. Principals live in control.principals_file (named in the
appliance config; mode 0600). A principal sees and touches only the
sandboxes it created, their events, reports and approvals; admin sees all.
The unix socket's caller is the admin "local".

'add' prints the new token once and stores only its hash; 'rm' revokes it.
Both then ask a running appliance to reload the file (as SIGHUP does), so a
revoked token is refused at once. Edits keep the file's comments; a change
that would make the file invalid is refused.`,
	Example: `  airlock principal add ci --scope sandbox:create,sandbox:exec,files,logs:read --sandboxes 5 --max-lifetime 2h
  airlock principal ls
  airlock principal rm ci
  AIRLOCK_URL=https://appliance.example.test:7443 AIRLOCK_TOKEN=alk_... AIRLOCK_FINGERPRINT=3f2a... airlock sandbox ls`,
	Args: cobra.NoArgs,
}

func init() {
	pf := principalCmd.PersistentFlags()
	pf.StringVar(&principalFlags.file, "file", "", "principals file (default: control.principals_file of --config)")
	pf.StringVarP(&principalFlags.config, "config", "c", "/etc/airlock/airlock.toml", "appliance config naming control.principals_file")
	principalCmd.AddCommand(principalAddCmd(), principalLsCmd(), principalRmCmd(), principalReloadCmd())
	rootCmd.AddCommand(principalCmd)
}

func principalAddCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "add NAME --scope SCOPE[,SCOPE...]",
		Short: "Add a principal: print its new token once, store only the token's hash",
		Long: `Add principal NAME with the given scopes and quota to the principals file
(created 0600 if it does not exist), print its bearer token on standard
output (once: only the SHA-256 is stored), and ask a running appliance to
reload the file. Quota flags left out mean no bound beyond the appliance's.`,
		Example: `  airlock principal add ci --scope sandbox:create,sandbox:exec,files,logs:read --sandboxes 5 --max-lifetime 2h --max-exec-timeout 10m --policy coding-agent
  airlock principal add reviewer --scope logs:read,approve --file /etc/airlock/principals.toml`,
		Args: cobra.ExactArgs(1),
		RunE: runPrincipalAdd,
	}
	f := cmd.Flags()
	f.StringSliceVar(&principalFlags.scopes, "scope", nil, "scopes, comma-separated or repeated: "+strings.Join(serve.AllScopes, ", "))
	f.IntVar(&principalFlags.sandboxes, "sandboxes", 0, "quota: sandboxes at once (0: only sandbox.max)")
	f.DurationVar(&principalFlags.maxLifetime, "max-lifetime", 0, "quota: longest sandbox lifetime, e.g. 2h (0: none)")
	f.DurationVar(&principalFlags.maxExec, "max-exec-timeout", 0, "quota: longest command timeout, e.g. 10m (0: none)")
	f.StringSliceVar(&principalFlags.policies, "policy", nil, "quota: policies it may use (default: all)")
	f.StringSliceVar(&principalFlags.images, "image", nil, "quota: images it may use (default: all; templates then refused)")
	f.BoolVar(&principalFlags.noReload, "no-reload", false, "do not ask a running appliance to reload the file")
	addSocketFlag(cmd)
	return cmd
}

func principalLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Short:   "List the principals of the principals file (never their tokens)",
		Example: `  airlock principal ls --file /etc/airlock/principals.toml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := principalsPath()
			if err != nil {
				return err
			}
			pf, _, err := readPrincipals(path)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSCOPES\tQUOTA")
			for _, name := range sortedNames(pf) {
				e := pf.Principals[name]
				fmt.Fprintf(tw, "%s\t%s\t%s\n", name, strings.Join(e.Scopes, ","), quotaString(e.Quota))
			}
			return tw.Flush()
		},
	}
}

func principalRmCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rm NAME",
		Short:   "Remove a principal (revoke its token) and reload a running appliance",
		Example: `  airlock principal rm ci`,
		Args:    cobra.ExactArgs(1),
		RunE:    runPrincipalRm,
	}
	cmd.Flags().BoolVar(&principalFlags.noReload, "no-reload", false, "do not ask a running appliance to reload the file")
	addSocketFlag(cmd)
	return cmd
}

func principalReloadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Ask the running appliance to reload its principals file (as SIGHUP does)",
		Long: `Reload control.principals_file in a running airlock serve. A file with errors
is refused, its errors are printed, and the running principals stay.`,
		Example: `  airlock principal reload --socket /run/airlock/airlock.sock`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return reloadPrincipals(cmd, true)
		},
	}
	addSocketFlag(cmd)
	return cmd
}

func runPrincipalAdd(cmd *cobra.Command, args []string) error {
	name := args[0]
	if len(principalFlags.scopes) == 0 {
		return usagef("principal add %s: give its scopes with --scope (%s)", name, strings.Join(serve.AllScopes, ", "))
	}
	path, err := principalsPath()
	if err != nil {
		return err
	}
	pf, src, err := readPrincipals(path)
	if err != nil {
		return err
	}
	if _, dup := pf.Principals[name]; dup {
		return fmt.Errorf("principal %q is already in %s: remove it first (airlock principal rm %s) to give it a new token", name, path, name)
	}
	token, hash := serve.NewToken()
	out := append(src, []byte(principalTOML(name, hash))...)
	if err := writePrincipals(path, out); err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), token)
	fmt.Fprintf(cmd.ErrOrStderr(), "airlock: added principal %s to %s (only the token's SHA-256 is stored: keep the token above, it is not shown again)\n", name, path)
	return reloadPrincipals(cmd, false)
}

func runPrincipalRm(cmd *cobra.Command, args []string) error {
	name := args[0]
	path, err := principalsPath()
	if err != nil {
		return err
	}
	pf, src, err := readPrincipals(path)
	if err != nil {
		return err
	}
	if _, ok := pf.Principals[name]; !ok {
		return fmt.Errorf("no principal %q in %s (see airlock principal ls)", name, path)
	}
	if err := writePrincipals(path, removeTable(src, name)); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "airlock: removed principal %s from %s\n", name, path)
	return reloadPrincipals(cmd, false)
}

// reloadPrincipals asks the appliance on the socket to reload. Unless
// must, an appliance that does not answer is a note, not an error.
func reloadPrincipals(cmd *cobra.Command, must bool) error {
	if principalFlags.noReload && !must {
		return nil
	}
	ctx, cancel := signalContext()
	defer cancel()
	res, err := apiClient().ReloadPrincipals(ctx)
	if err != nil {
		if must {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "airlock: the running appliance did not reload (%v): run `airlock principal reload` or send airlock serve SIGHUP\n", err)
		return nil
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "airlock: reloaded; principals now: %s\n", strings.Join(res.Principals, ", "))
	return nil
}

func principalsPath() (string, error) {
	if principalFlags.file != "" {
		return principalFlags.file, nil
	}
	cfg, err := serve.Load(principalFlags.config)
	if err != nil {
		return "", fmt.Errorf("find the principals file: %w (or pass --file)", err)
	}
	if cfg.Control.PrincipalsFile == "" {
		return "", fmt.Errorf("%s sets no control.principals_file: add one (e.g. /etc/airlock/principals.toml) or pass --file", principalFlags.config)
	}
	return cfg.Control.PrincipalsFile, nil
}

// readPrincipals reads and validates the file; a missing one is empty.
func readPrincipals(path string) (*serve.PrincipalsFile, []byte, error) {
	src, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		src = []byte("# Principals of the control API (docs/api.md). Edited by `airlock principal`.\nversion = 1\n")
	} else if err != nil {
		return nil, nil, fmt.Errorf("principals file: %w", err)
	}
	pf, errs := serve.DecodePrincipals(path, src)
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("principals file has errors; fix them first:\n%w", errs)
	}
	if pf.Principals == nil {
		pf.Principals = map[string]serve.PrincipalEntry{}
	}
	return pf, src, nil
}

// writePrincipals validates src and replaces the file with it (0600,
// through a temporary file renamed over it).
func writePrincipals(path string, src []byte) error {
	if _, errs := serve.DecodePrincipals(path, src); len(errs) > 0 {
		return fmt.Errorf("the change would make the principals file invalid (nothing written):\n%w", errs)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".principals-*")
	if err != nil {
		return fmt.Errorf("principals file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(src); err != nil {
		tmp.Close()
		return fmt.Errorf("principals file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
