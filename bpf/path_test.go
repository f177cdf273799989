package bpf

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
)

func TestAttachRejectsBadInput(t *testing.T) {
	requireRoot(t)
	p := openTest(t, Options{})
	good := SandboxNet{Sandbox: SandboxID{Num: 5, Name: "s"}, Addr: mustAddr("198.18.5.2"), Gateway: mustAddr("198.18.5.1")}
	// An interface without the guarded prefix: no guard would cover it.
	name := "alkx" + randHex(3)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			netlink.LinkDel(l)
		}
	})
	unguarded, err := net.InterfaceByName(name)
	must(t, err)
	cases := []struct {
		name    string
		ifindex int
		mut     func(*SandboxNet)
		want    string
	}{
		{"zero id", unguarded.Index, func(n *SandboxNet) { n.Sandbox.Num = 0 }, "outside 1..4095"},
		{"id too large", unguarded.Index, func(n *SandboxNet) { n.Sandbox.Num = MaxSandboxes }, "outside 1..4095"},
		{"ipv6 address", unguarded.Index, func(n *SandboxNet) { n.Addr = netip.MustParseAddr("fd00::2") }, "not IPv4"},
		{"no gateway", unguarded.Index, func(n *SandboxNet) { n.Gateway = netip.Addr{} }, "gateway"},
		{"short mac", unguarded.Index, func(n *SandboxNet) { n.MAC = net.HardwareAddr{1, 2, 3} }, "MAC"},
		{"long name", unguarded.Index, func(n *SandboxNet) { n.Sandbox.Name = strings.Repeat("x", 48) }, "longer than 47"},
		{"missing interface", 1 << 30, func(*SandboxNet) {}, "interface"},
		{"unguarded interface", unguarded.Index, func(*SandboxNet) {}, "lacks the guarded prefix"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := good
			c.mut(&n)
			_, err := p.Attach(c.ifindex, n)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Attach: %v, want an error mentioning %q", err, c.want)
			}
		})
	}
	if hs, _ := p.Handles(); len(hs) != 0 {
		t.Errorf("rejected attaches left handles: %+v", hs)
	}
}

// A pinned map whose layout differs from this build is refused with an
// error that says so, rather than silently reused or replaced.
func TestOpenRefusesIncompatiblePin(t *testing.T) {
	requireRoot(t)
	g := testGuard()
	dir := filepath.Join("/sys/fs/bpf", "airlock-test-"+randHex(4))
	cleanupPins(t, dir, g)
	must(t, os.MkdirAll(filepath.Join(dir, pinVersion), 0o700))
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "alk_stats", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 16})
	must(t, err)
	defer m.Close()
	must(t, m.Pin(filepath.Join(dir, pinVersion, "alk_stats")))
	_, err = Open(dir, Options{Guard: g})
	if err == nil || !errors.Is(err, ebpf.ErrMapIncompatible) || !strings.Contains(err.Error(), "pinVersion") {
		t.Fatalf("Open over an incompatible pin: %v", err)
	}
}

func TestReopenWithoutPins(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join("/sys/fs/bpf", "airlock-test-"+randHex(4))
	if _, err := Reopen(dir, Options{Guard: testGuard()}); !errors.Is(err, ErrNotPinned) {
		t.Fatalf("Reopen of an empty dir: %v, want ErrNotPinned", err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("Reopen created %s", dir)
	}
}

func TestProbe(t *testing.T) {
	requireRoot(t)
	if err := Probe(); err != nil {
		t.Fatalf("Probe on the CI kernel: %v", err)
	}
}
