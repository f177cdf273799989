package bpf

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (BPF, netns, nftables); CI runs as root")
	}
	if err := Probe(); err != nil {
		t.Skipf("skipping: %v", err)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func randInt(n int64) int64 {
	v, _ := rand.Int(rand.Reader, big.NewInt(n))
	return v.Int64()
}

// testGuard returns guard settings no other run uses: a random interface
// prefix, nft table, routing table in 20000-29999 and a random full mark.
func testGuard() GuardConfig {
	mark := uint32(0x01000000 | randInt(1<<24))
	return GuardConfig{
		IfacePrefix:  "at" + randHex(2), // "at" + 4 hex: 6 bytes
		Mark:         mark,
		MarkMask:     0xffffffff,
		Table:        int(20000 + randInt(10000)),
		RulePriority: int(20000 + randInt(10000)),
		NFTTable:     "airlock_test_" + randHex(4),
	}
}

// openTest opens a path with a test-only pin dir and guards, removed at cleanup.
func openTest(t testing.TB, opts Options) *Path {
	t.Helper()
	if opts.Guard == (GuardConfig{}) {
		opts.Guard = testGuard()
	}
	dir := filepath.Join("/sys/fs/bpf", "airlock-test-"+randHex(4))
	cleanupPins(t, dir, opts.Guard)
	p, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %+v", err)
	}
	t.Cleanup(func() {
		if err := p.Teardown(); err != nil {
			t.Errorf("Teardown: %v", err)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("pin dir %s left behind", dir)
			os.RemoveAll(dir)
		}
	})
	return p
}

// cleanupPins registers a last-resort cleanup (it runs after every other one)
// that removes the pin dir and guards even when Open failed half-way.
func cleanupPins(t testing.TB, dir string, g GuardConfig) {
	t.Cleanup(func() {
		os.RemoveAll(dir)
		_ = removeGuards(g.withDefaults())
	})
}

// Frame builders for synthetic packets (checksums are not checked by the program).

var (
	macSandbox = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 2}
	macHost    = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}
)

func ethFrame(src net.HardwareAddr, etherType uint16, payload []byte) []byte {
	b := make([]byte, 14, 14+len(payload))
	copy(b[0:6], macHost)
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:], etherType)
	return append(b, payload...)
}

type ipOpts struct {
	options  bool
	fragOff  uint16 // raw flags+offset
	proto    uint8
	src, dst netip.Addr
}

func ipv4Packet(o ipOpts, l4 []byte) []byte {
	hl := 20
	if o.options {
		hl = 24
	}
	b := make([]byte, hl, hl+len(l4))
	b[0] = 0x40 | byte(hl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(hl+len(l4)))
	binary.BigEndian.PutUint16(b[6:], o.fragOff)
	b[8] = 64
	b[9] = o.proto
	s, d := o.src.As4(), o.dst.As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	return append(b, l4...)
}

func tcpSegment(sport, dport uint16, flags byte) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	b[12] = 5 << 4
	b[13] = flags
	binary.BigEndian.PutUint16(b[14:], 65535)
	return b
}

func udpDatagram(sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

func icmpEcho() []byte { return []byte{8, 0, 0, 0, 0, 1, 0, 1, 'p', 'i', 'n', 'g'} }

func arpPacket(op uint16, sha net.HardwareAddr, spa, tpa netip.Addr) []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:], 1)
	binary.BigEndian.PutUint16(b[2:], 0x0800)
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:], op)
	copy(b[8:14], sha)
	s, d := spa.As4(), tpa.As4()
	copy(b[14:18], s[:])
	copy(b[24:28], d[:])
	return b
}

func ipv6Packet(next uint8, src, dst netip.Addr, l4 []byte) []byte {
	b := make([]byte, 40, 40+len(l4))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(l4)))
	b[6] = next
	b[7] = 64
	s, d := src.As16(), dst.As16()
	copy(b[8:24], s[:])
	copy(b[24:40], d[:])
	return append(b, l4...)
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func fmtStats(s Stats) string { return fmt.Sprintf("%+v", s) }
