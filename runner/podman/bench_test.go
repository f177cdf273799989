package podman_test

import (
	"context"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"airlock/runner"
)

func p50(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}

// BenchmarkExecEcho measures the exec round trip of `echo hi` in a running
// sandbox; it reports the median as p50-ms.
func BenchmarkExecEcho(b *testing.B) {
	e := newEnv(b, nil)
	ctx := context.Background()
	sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		e.mustExec(b, sb.ID, "echo", "hi")
		ds = append(ds, time.Since(t0))
	}
	b.ReportMetric(p50(ds), "p50-ms")
}

// BenchmarkCreateToFirstExec compares, in one run and interleaved, the time
// from Create to the end of a first `echo hi` in a busybox sandbox (with
// its veth, network hook, CA bundle and resolv.conf) against a bare
// `podman run --rm --network none --runtime runc` of the same image by the
// same user. It reports both medians and their ratio (target <= 1.2).
func BenchmarkCreateToFirstExec(b *testing.B) {
	e := newEnv(b, nil)
	ctx := context.Background()
	bare := barePodmanRun(b)
	warm, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	e.r.Destroy(ctx, warm.ID)
	if out, err := bare().CombinedOutput(); err != nil {
		b.Fatalf("podman run: %v: %s", err, out)
	}
	var ours, theirs []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		sb, err := e.r.Create(ctx, runner.CreateRequest{Image: busybox, Policy: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		e.mustExec(b, sb.ID, "echo", "hi")
		ours = append(ours, time.Since(t0))
		b.StopTimer()
		if err := e.r.Destroy(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 = time.Now()
		if out, err := bare().CombinedOutput(); err != nil || string(out) != "hi\n" {
			b.Fatalf("podman run: %v: %q", err, out)
		}
		theirs = append(theirs, time.Since(t0))
	}
	b.ReportMetric(p50(ours), "airlock-p50-ms")
	b.ReportMetric(p50(theirs), "podman-run-p50-ms")
	b.ReportMetric(p50(ours)/p50(theirs), "ratio")
}

// barePodmanRun returns a command factory for the baseline, run as the
// sandbox user in the same storage.
func barePodmanRun(b *testing.B) func() *exec.Cmd {
	u, err := user.Lookup("airlock-sandbox")
	if err != nil {
		b.Skip("no sandbox user: ", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return func() *exec.Cmd {
		cmd := exec.Command("podman", "run", "--rm", "--network", "none", "--runtime", "runc", busybox, "echo", "hi")
		cmd.Dir = u.HomeDir
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + u.HomeDir,
			"XDG_RUNTIME_DIR=" + filepath.Join("/run/user", u.Uid), "USER=" + u.Username}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
		return cmd
	}
}
