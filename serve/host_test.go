package serve

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/bpf"
	"airlock/runner"
)

// Each instance but the default gets host guards of its own, and every
// guard matches the runner's veths.
func TestHostGuardNames(t *testing.T) {
	if g := hostGuard(Options{Instance: "default"}); g != (bpf.GuardConfig{IfacePrefix: runner.VethPrefix}) {
		t.Errorf("default instance: %+v, want bpf's defaults on the runner's veths", g)
	}
	a, b := hostGuard(Options{Instance: "quickstart"}), hostGuard(Options{Instance: "bench"})
	if a.NFTTable != "airlock-quickstart" || a.Table < 2000 || a.Table >= 3000 || a.RulePriority != a.Table || a.IfacePrefix != runner.VethPrefix {
		t.Errorf("instance quickstart: %+v", a)
	}
	if a.Table == b.Table || a.NFTTable == b.NFTTable {
		t.Errorf("two instances share guards: %+v and %+v", a, b)
	}
	own := bpf.GuardConfig{NFTTable: "airlock-st-x", Table: 2500, RulePriority: 2500}
	if g := hostGuard(Options{Instance: "quickstart", Guard: own}); g.NFTTable != own.NFTTable || g.Table != 2500 || g.IfacePrefix != runner.VethPrefix {
		t.Errorf("a given guard is not kept: %+v", g)
	}
}

// Teardown refuses while an appliance answers on the control socket, and
// says when nothing is pinned; it removes nothing in either case.
func TestTeardownRefusals(t *testing.T) {
	dir := t.TempDir()
	pins := filepath.Join(dir, "pins")
	if err := os.Mkdir(pins, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{}
	cfg.Control.Socket = filepath.Join(dir, "airlock.sock")

	err := Teardown(cfg, Options{Instance: "t", PinDir: pins})
	if !errors.Is(err, bpf.ErrNotPinned) {
		t.Errorf("nothing pinned: %v, want bpf.ErrNotPinned", err)
	}

	ln, err := net.Listen("unix", cfg.Control.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = Teardown(cfg, Options{Instance: "t", PinDir: pins})
	if err == nil || !strings.Contains(err.Error(), "still running on "+cfg.Control.Socket) {
		t.Errorf("appliance running: %v, want a refusal naming the socket", err)
	}
	if _, err := os.Stat(pins); err != nil {
		t.Errorf("a refused teardown removed the pin directory: %v", err)
	}
}
