//go:build remote

package serve_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"airlock/audit"
	"airlock/client"
	"airlock/e2e/world"
)

// stateModes: the state directory existed 0755 before the start (writeFiles
// makes it so) and stayed 0755; audit.db was 0644. The appliance tightens
// the directory to 0700 and keeps the store and the CA key 0600.
func stateModes(t *testing.T, l *lab) {
	state := filepath.Join(l.dir, "state")
	for p, want := range map[string]os.FileMode{
		state:                            0o700,
		filepath.Join(state, "audit.db"): 0o600,
		filepath.Join(state, "ca.key"):   0o600,
	} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s is %04o, want %04o", filepath.Base(p), got, want)
		}
	}
}

// macSpoof: a sandbox with NET_ADMIN (and NET_RAW, which busybox ip needs
// for it) changes its veth's MAC. The kernel
// path pins the (address, MAC) pair, so its traffic is dropped from then
// on, each drop a `spoofed-mac` event; before the change it resolved.
func macSpoof(t *testing.T, l *lab) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := l.c.Create(ctx, client.CreateRequest{Image: busyboxImage, CapAdd: []string{"NET_ADMIN", "NET_RAW"}})
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, l.tail(20))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l.c.Delete(ctx, sb.ID)
	})
	lookup := "nslookup " + l.w.Name(world.RoleNPM) + " " + l.gw.String()
	if r := l.exec(sb.ID, lookup); r.code != 0 {
		t.Fatalf("before the MAC change the sandbox cannot resolve: %v", r)
	}
	if r := l.exec(sb.ID, "ip link set dev eth0 address 02:ee:00:00:00:01 && ip link show eth0"); r.code != 0 || !strings.Contains(r.stdout, "02:ee:00:00:00:01") {
		t.Fatalf("change the MAC: %v", r)
	}
	if r := l.exec(sb.ID, "timeout 15 "+lookup); r.code == 0 {
		t.Errorf("after the MAC change the sandbox still resolves: %v", r)
	}
	// ARP from the spoofed MAC (for the gateway) is dropped the same way.
	l.exec(sb.ID, "ip neigh flush dev eth0; timeout 5 "+lookup+"; true")
	waitFor(t, 30*time.Second, "a spoofed-mac drop event", func() bool {
		for _, e := range l.events(sb.ID) {
			if e.Kind == audit.KindDrop && e.Rule == "kernel:spoofed-mac" && e.Drop != nil && e.Drop.MAC == "02:ee:00:00:00:01" {
				return true
			}
		}
		return false
	})
}

// irregularPolicies: a FIFO in policy_dir wedged every later reload and
// the graceful shutdown; a link to /dev/zero made serve read until it was
// OOM-killed. Each is now rejected at once, by the API and by SIGHUP, and
// SIGTERM still stops serve promptly. It stops the appliance: run it last.
func irregularPolicies(t *testing.T, l *lab) {
	if l.helper.ProcessState != nil { // the kill -9 test's appliance ended with it
		l.startServe()
	}
	dir := filepath.Join(l.dir, "policies")
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.toml"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.toml")); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(l.dir, "outside.toml")
	os.WriteFile(outside, []byte("version = 1\n"), 0o600)
	if err := os.Symlink(outside, filepath.Join(dir, "out.toml")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big.toml"), []byte("version = 1\n#"+strings.Repeat("x", 4<<20)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for round := range 2 { // a second reload is not held up by the first
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := l.c.ReloadPolicies(ctx)
		cancel()
		if err != nil {
			t.Fatalf("reload %d: %v\n%s", round, err, l.tail(20))
		}
		want := map[string]string{"fifo": "named pipe (FIFO)", "zero": "leaves its directory",
			"out": "leaves its directory", "big": "above the 4 MiB cap"}
		for _, r := range res.Rejected {
			if w, ok := want[r.Name]; ok && strings.Contains(strings.Join(r.Errors, "\n"), w) {
				delete(want, r.Name)
			}
		}
		if len(want) > 0 {
			t.Errorf("reload %d: %+v; not rejected as expected: %v", round, res, want)
		}
	}
	old := countPolicyEvents(t, l, "fifo")
	l.helper.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, "the SIGHUP reload to reject the FIFO", func() bool { return countPolicyEvents(t, l, "fifo") > old })
	if _, err := l.c.Health(context.Background()); err != nil {
		t.Fatalf("after the reloads the API does not answer: %v", err)
	}
	start := time.Now()
	l.helper.Process.Signal(syscall.SIGTERM)
	waitFor(t, 15*time.Second, "a graceful shutdown with a FIFO in policy_dir", func() bool { return l.helper.ProcessState != nil })
	t.Logf("graceful shutdown took %s", time.Since(start).Round(time.Millisecond))
	if !l.helper.ProcessState.Success() {
		t.Errorf("serve exited %v on SIGTERM:\n%s", l.helper.ProcessState, l.tail(20))
	}
}

func countPolicyEvents(t *testing.T, l *lab, name string) int {
	n := 0
	for _, e := range l.events("") {
		if e.Kind == audit.KindPolicy && e.Policy != nil && e.Policy.Name == name && e.Policy.Action == "rejected" {
			n++
		}
	}
	return n
}
