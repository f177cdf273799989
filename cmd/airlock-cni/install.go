package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"

	"airlock/client"
)

// OwnConflist is the file install writes: it sorts before the main
// plugin's, so the runtime takes it.
const OwnConflist = "00-airlock.conflist"

// maxConfFile bounds a CNI configuration file install reads.
const maxConfFile = 1 << 20

const installUsage = `usage: airlock-cni install [flags]

Copies this binary into the CNI bin directory and writes %s into the
CNI configuration directory: the node's main network (the lexically first
other *.conflist or *.conf there) with airlock-cni chained after its
plugins. Run it again after the main plugin rewrote its file; it is
idempotent. Delete %s to uninstall (pods then fail ADD while no agent runs).

Example (the DaemonSet's init container, deploy/kubernetes/):
  airlock-cni install --bin-dir /host/opt/cni/bin --conf-dir /host/etc/cni/net.d \
      --socket /run/airlock/airlock.sock

Flags:
`

type installOpts struct {
	binDir, confDir, socket, policy string
}

// runInstall is `airlock-cni install`: the one command the plugin takes
// outside the CNI protocol (no CNI_COMMAND set).
func runInstall(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o installOpts
	fs.StringVar(&o.binDir, "bin-dir", "/opt/cni/bin", "CNI plugin directory to copy airlock-cni into")
	fs.StringVar(&o.confDir, "conf-dir", "/etc/cni/net.d", "CNI configuration directory")
	fs.StringVar(&o.socket, "socket", client.DefaultSocket, "the node agent's control socket, as the plugin sees it on the host")
	fs.StringVar(&o.policy, "policy", "", "policy for pods that name none (default: the node's default_policy)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, installUsage, OwnConflist, OwnConflist)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := install(o); err != nil {
		fmt.Fprintln(stderr, "airlock-cni install:", err)
		return 1
	}
	fmt.Fprintf(stderr, "airlock-cni install: wrote %s and %s\n",
		filepath.Join(o.binDir, "airlock-cni"), filepath.Join(o.confDir, OwnConflist))
	return 0
}

func install(o installOpts) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := copyFile(self, filepath.Join(o.binDir, "airlock-cni"), 0o755); err != nil {
		return err
	}
	name, b, err := mainConf(o.confDir)
	if err != nil {
		return err
	}
	out, err := chain(b, o.socket, o.policy)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return writeAtomic(filepath.Join(o.confDir, OwnConflist), out, 0o644)
}

// mainConf finds the node's main network configuration: the lexically
// first *.conflist, *.conf or *.json in dir other than OwnConflist.
func mainConf(dir string) (string, []byte, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, err
	}
	var names []string
	for _, e := range es {
		ext := filepath.Ext(e.Name())
		if e.Name() != OwnConflist && e.Type().IsRegular() && (ext == ".conflist" || ext == ".conf" || ext == ".json") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return "", nil, fmt.Errorf("no CNI configuration in %s: install the cluster's main network plugin first", dir)
	}
	sort.Strings(names)
	p := filepath.Join(dir, names[0])
	b, err := readBounded(p)
	return p, b, err
}

func readBounded(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfFile+1))
	if err == nil && len(b) > maxConfFile {
		err = fmt.Errorf("%s is larger than %d bytes", p, maxConfFile)
	}
	return b, err
}

// chain returns the conflist of the main network b (a conflist, or a
// single plugin's .conf) with airlock-cni as its last plugin, replacing an
// airlock-cni entry already there.
func chain(b []byte, socket, policy string) ([]byte, error) {
	var list map[string]any
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	plugins, err := pluginsOf(list)
	if err != nil {
		return nil, err
	}
	v, _ := list["cniVersion"].(string)
	if ok, err := version.GreaterThanOrEqualTo(v, "1.0.0"); err != nil || !ok {
		return nil, fmt.Errorf("cniVersion %q: airlock-cni needs 1.0.0 or later (raise the main plugin's cniVersion)", v)
	}
	if name, _ := list["name"].(string); name == "" {
		return nil, errors.New(`the network has no "name"`)
	}
	for i, p := range plugins {
		if m, ok := p.(map[string]any); !ok || m["type"] == nil || m["type"] == "" {
			return nil, fmt.Errorf("plugins[%d]: not a plugin with a \"type\"", i)
		} else if _, ok := m["type"].(string); !ok {
			return nil, fmt.Errorf("plugins[%d]: \"type\" is not a string", i)
		}
	}
	plugins = slices.DeleteFunc(plugins, func(p any) bool {
		m, _ := p.(map[string]any)
		return m["type"] == "airlock-cni"
	})
	own := map[string]any{"type": "airlock-cni", "socket": socket,
		"capabilities": map[string]bool{annotationsCap: true}}
	if policy != "" {
		own["policy"] = policy
	}
	list["plugins"] = append(plugins, own)
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, err
	}
	// The runtime's own parser has the last word.
	if _, err := libcni.ConfListFromBytes(out); err != nil {
		return nil, err
	}
	return out, nil
}

// pluginsOf returns the plugin list of a conflist, turning a .conf (one
// plugin at the top level) into a list of one in place.
func pluginsOf(list map[string]any) ([]any, error) {
	if raw, ok := list["plugins"]; ok {
		ps, ok := raw.([]any)
		if !ok || len(ps) == 0 {
			return nil, errors.New(`"plugins" must be a non-empty list`)
		}
		return ps, nil
	}
	t, _ := list["type"].(string)
	if t == "" {
		return nil, errors.New(`neither "plugins" nor a plugin "type": not a CNI configuration`)
	}
	one := map[string]any{}
	for k, v := range list {
		if k != "cniVersion" && k != "name" {
			one[k] = v
			delete(list, k)
		}
	}
	return []any{one}, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return writeAtomic(dst, b, mode)
}

// writeAtomic writes b to a temporary file beside p and renames it over
// p, so a runtime never reads half a file or runs half a binary.
func writeAtomic(p string, b []byte, mode os.FileMode) error {
	tmp := p + ".airlock-tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// isInstall reports whether the process was started as `airlock-cni
// install` rather than by a runtime (which always sets CNI_COMMAND).
func isInstall(args []string) bool {
	return len(args) > 1 && args[1] == "install" && strings.TrimSpace(os.Getenv("CNI_COMMAND")) == ""
}
