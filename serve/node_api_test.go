package serve

import (
	"context"
	"os"
	"strings"
	"testing"

	"airlock/client"
)

// A backend without NodeBackend answers the pod routes "unsupported",
// which the plugin turns into a refusal (ADD) or code 50 (STATUS).
func TestNodeRoutesUnsupported(t *testing.T) {
	c, _ := startAPI(t, newFake(), "")
	ctx := context.Background()
	calls := map[string]func() error{
		"attach": func() error { _, err := c.AttachPod(ctx, client.PodAttachRequest{ContainerID: "c"}); return err },
		"check":  func() error { _, err := c.CheckPod(ctx, "pod-0123456789"); return err },
		"detach": func() error { return c.DetachPod(ctx, "pod-0123456789") },
		"list":   func() error { _, err := c.Pods(ctx); return err },
		"gc":     func() error { _, err := c.GCPods(ctx, client.PodGCRequest{}); return err },
		"status": func() error { _, err := c.NodeStatus(ctx); return err },
	}
	for name, call := range calls {
		if err := call(); !client.IsCode(err, client.CodeUnsupported) {
			t.Errorf("%s without a node backend: %v, want unsupported", name, err)
		}
	}
}

// An appliance that is not a node agent refuses pods with a hint.
func TestApplianceNotNodeRefusesPods(t *testing.T) {
	a := &Appliance{}
	_, err := a.AttachPod(context.Background(), client.PodAttachRequest{})
	if !client.IsCode(err, client.CodeUnsupported) {
		t.Fatalf("AttachPod on a Podman appliance: %v", err)
	}
	if st := a.NodeStatus(context.Background()); st.Node || st.Ready {
		t.Fatalf("NodeStatus of a Podman appliance: %+v", st)
	}
	if err := a.DetachPod(context.Background(), "pod-0123456789"); !client.IsCode(err, client.CodeUnsupported) {
		t.Fatalf("DetachPod on a Podman appliance: %v", err)
	}
}

func TestPodIDFitsAnInterfaceName(t *testing.T) {
	id := client.PodID("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "eth0")
	if name := podIfName(id); len(name) > 15 || name[:4] != "alk-" {
		t.Fatalf("pod %s gets host interface %q: want alk- and at most 15 bytes", id, name)
	}
	if client.PodID("c", "eth0") == client.PodID("c", "eth1") {
		t.Fatal("two interfaces of one container share a pod id")
	}
}

// The registry file survives a reload: a second store reads what the
// first wrote, and a removal sticks.
func TestPodStorePersists(t *testing.T) {
	path := podsFile(t.TempDir(), "test")
	s := newPodStore(path)
	if err := s.load(); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	for _, id := range []string{"pod-aaaaaaaaaa", "pod-bbbbbbbbbb"} {
		if err := s.put(podRecord{Pod: client.Pod{ID: id, Address: "198.18.0.2"}, Gateway: "198.18.0.1", Num: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.remove("pod-aaaaaaaaaa"); err != nil {
		t.Fatal(err)
	}
	s2 := newPodStore(path)
	if err := s2.load(); err != nil {
		t.Fatal(err)
	}
	if l := s2.list(); len(l) != 1 || l[0].ID != "pod-bbbbbbbbbb" || l[0].Gateway != "198.18.0.1" {
		t.Fatalf("reloaded registry: %+v", l)
	}
}

// FuzzPodStoreLoad: any registry file loads or fails with an error naming
// it, never a panic.
func FuzzPodStoreLoad(f *testing.F) {
	f.Add([]byte(`[{"id":"pod-aaaaaaaaaa","address":"198.18.0.2","gateway":"198.18.0.1","num":1}]`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := podsFile(t.TempDir(), "fuzz")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := newPodStore(path).load(); err != nil && !strings.Contains(err.Error(), path) {
			t.Fatalf("error without the file's name: %v", err)
		}
	})
}
