package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	"github.com/vishvananda/netlink"

	"airlock/client"
)

// An ADD the agent refused after it renamed the host veth into the
// guarded prefix still leaves the pod without a veth: failClosed tries
// the main plugin's name and the agent's.
func TestFailClosedDeletesRenamedVeth(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (creates a veth pair)")
	}
	id := client.PodID("ctr-failclosed-"+randomSuffix(t), "eth0")
	name := client.PodIfName(id)
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "alt" + id[4:14]}
	if err := netlink.LinkAdd(v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			netlink.LinkDel(l)
		}
	})
	cause := errors.New("refused")
	if err := failClosed(cause, "veth-gone-0000", name); err != cause {
		t.Fatalf("failClosed: %v, want the cause", err)
	}
	if _, err := netlink.LinkByName(name); err == nil {
		t.Fatalf("the renamed veth %s is still there", name)
	}
}

func randomSuffix(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
