// Command airlock-world runs the end-to-end tests' hermetic world (package
// airlock/e2e/world: a network namespace with a DNS server for .test, a git
// server, an npm registry, a Python index, an internal API, a webhook sink,
// an evil server and a canary) as a process of its own, for the quick start
// (scripts/quickstart.sh, `make run`).
//
// Once the world is up it writes the e2e policy rendered for the world's
// addresses (-policy), the appliance's secret store holding the internal
// API's credential (-secrets) and shell assignments that describe the world
// (-env, written last: its appearance means the world is ready). It runs
// until SIGTERM or SIGINT, then prints what reached the world's servers and
// removes the namespace, its veth pair and its files.
//
//	airlock-world -env world.env -policy policies/e2e.toml -secrets secrets
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"airlock/e2e"
	"airlock/e2e/world"
)

func main() {
	var o options
	flag.StringVar(&o.env, "env", "", "write the world's addresses here as shell assignments once it is up (required)")
	flag.StringVar(&o.policy, "policy", "", "write the e2e policy, rendered for this world's addresses, to this file")
	flag.StringVar(&o.secrets, "secrets", "", "write an appliance secret store (staging-token=...) for the internal API to this file")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: airlock-world -env FILE [-policy FILE] [-secrets FILE]\n"+
			"example: airlock-world -env /tmp/w/world.env -policy /tmp/w/policies/e2e.toml -secrets /tmp/w/secrets\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if o.env == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-world: %v\n", err)
		os.Exit(1)
	}
}

type options struct{ env, policy, secrets string }

func run(o options) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	w, err := world.Start(sctx, world.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.Close()) }()
	if err := writeFiles(w, o); err != nil {
		return err
	}
	<-ctx.Done()
	fmt.Print(Summarize(w, w.Since(0)))
	return nil
}

// writeFiles writes the policy and the secret store, then the env file.
func writeFiles(w *world.World, o options) error {
	if o.policy != "" {
		pol, err := e2e.RenderPolicy(e2e.AddrsOf(w))
		if err != nil {
			return err
		}
		if err := writeAtomic(o.policy, pol, 0o600); err != nil {
			return err
		}
	}
	if o.secrets != "" {
		if err := writeAtomic(o.secrets, []byte("staging-token="+w.APIToken+"\n"), 0o600); err != nil {
			return err
		}
	}
	return writeAtomic(o.env, []byte(envFile(w)), 0o600)
}

// envFile describes the world in shell assignments (never its secret).
func envFile(w *world.World) string {
	var allow []string
	for _, r := range []world.Role{world.RoleDNS, world.RoleNPM, world.RolePyPI, world.RoleGit, world.RoleAPI, world.RoleHooks} {
		allow = append(allow, w.Addr(r).String()+"/32")
	}
	vars := [][2]string{
		{"WORLD_NETNS", w.NetNS},
		{"WORLD_DNS", w.DNSAddr().Addr().String()},
		{"WORLD_CA_FILE", w.CAFile},
		{"WORLD_ALLOW", strings.Join(allow, " ")},
		{"WORLD_EVIL", w.Addr(world.RoleEvil).String()},
		{"WORLD_CANARY", w.Addr(world.RoleCanary).String()},
		{"WORLD_GIT_URL", w.GitURL()},
		{"WORLD_GIT_HEAD", w.GitHead},
		{"WORLD_POLICY", e2e.PolicyName},
	}
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "%s='%s'\n", v[0], strings.ReplaceAll(v[1], "'", `'\''`))
	}
	return b.String()
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".airlock-world-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
