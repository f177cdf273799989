package preview

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the in-netns app of TestDialNetns.
func TestMain(m *testing.M) {
	if port := os.Getenv("PREVIEW_TEST_APP"); port != "" {
		ln, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "inside") }))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// netnsApp starts this test binary as an app on 127.0.0.1:port in a new
// network namespace and returns its pid (killed at cleanup).
func netnsApp(t *testing.T, port int) int {
	if os.Geteuid() != 0 {
		t.Skip("skipped: entering a network namespace needs root")
	}
	cmd := exec.Command("unshare", "--net", "--", "sh", "-c", `ip link set lo up && exec "$0"`, os.Args[0])
	cmd.Env = append(os.Environ(), "PREVIEW_TEST_APP="+strconv.Itoa(port))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// The dialer reaches the port on the netns's loopback, not the host's
// (where a decoy listens on the same port), and a port nobody listens on
// there is refused at once.
func TestDialNetns(t *testing.T) {
	decoy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer decoy.Close()
	go http.Serve(decoy, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "host") }))
	port := decoy.Addr().(*net.TCPAddr).Port
	pid := netnsApp(t, port)
	var body string
	for i := 0; i < 100 && body != "inside"; i++ {
		time.Sleep(30 * time.Millisecond)
		body, _ = viaNetns(pid, uint16(port))
	}
	if body != "inside" {
		t.Fatalf("got %q, want the app inside the netns", body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = DialNetns(ctx, pid, uint16(port+1))
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("closed port: %v, want connection refused", err)
	}
	if _, err := DialNetns(ctx, 1<<30, 80); err == nil {
		t.Error("dialed through a pid that does not exist")
	}
}

func viaNetns(pid int, port uint16) (string, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return DialNetns(ctx, pid, port) }}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get("http://app/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
