// Command exec is the Go side of bench/exec.sh: it times, in one run and
// on one sandbox, the echo round trip through the in-sandbox agent (the
// agent channel itself, and the control API's Go client through airlock
// serve) against podman exec through the Podman API, single-file writes
// and reads against `sandbox cp`'s tar path, and concurrency.
//
//	go run -tags '...' ./bench/exec -socket S -podman P -sandbox ID -container NAME -pid PID
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"airlock/client"
	"airlock/internal/agentwire"
	"airlock/runner"
	"airlock/runner/agent"
	"airlock/runner/podman"
)

func main() {
	socket := flag.String("socket", "", "airlock control socket")
	podmanSock := flag.String("podman", "", "the sandbox user's podman service socket")
	sandbox := flag.String("sandbox", "", "sandbox id (running the agent)")
	container := flag.String("container", "", "its container name")
	pid := flag.Int("pid", 0, "its PID 1 (host pid)")
	n := flag.Int("n", 300, "agent round trips per path")
	np := flag.Int("np", 30, "podman round trips per path")
	mode := flag.String("mode", "latency", "latency | files | concurrent | many")
	ids := flag.String("sandboxes", "", "many: comma-separated sandbox ids")
	flag.Parse()
	ctx := context.Background()
	c := client.New(*socket)
	var err error
	switch *mode {
	case "latency":
		err = latency(ctx, c, *podmanSock, *sandbox, *container, *pid, *n, *np)
	case "files":
		err = files(ctx, c, *sandbox, *n)
	case "concurrent":
		err = concurrent(ctx, c, *sandbox, 100)
	case "many":
		err = many(ctx, c, strings.Split(*ids, ","), 10)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/exec:", err)
		os.Exit(1)
	}
}

type stats []time.Duration

func (s stats) pct(p float64) time.Duration {
	x := slices.Clone(s)
	slices.Sort(x)
	i := int(float64(len(x))*p+0.5) - 1
	return x[max(0, min(i, len(x)-1))]
}

func row(name string, s stats) {
	fmt.Printf("  %-52s p50 %8.2f ms   p99 %8.2f ms   (n=%d)\n", name, ms(s.pct(0.5)), ms(s.pct(0.99)), len(s))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func timeN(n int, f func() error) (stats, error) {
	var s stats
	for range n {
		t := time.Now()
		if err := f(); err != nil {
			return s, err
		}
		s = append(s, time.Since(t))
	}
	return s, nil
}

func latency(ctx context.Context, c *client.Client, podmanSock, sb, ctr string, pid, n, np int) error {
	ac, err := agent.New(pid)
	if err != nil {
		return err
	}
	defer ac.Close()
	seq := 0
	direct, err := timeN(n, func() error {
		seq++
		var out bytes.Buffer
		e, err := ac.Exec(ctx, agentwire.Request{ID: fmt.Sprintf("bench-%d", seq), Argv: []string{"echo", "hi"}}, agent.Streams{Stdout: &out}, nil)
		if err == nil && (e.Code != 0 || out.String() != "hi\n") {
			err = fmt.Errorf("echo: %+v %q", e, out.String())
		}
		if err == nil {
			_, err = ac.Do(ctx, agentwire.Request{Op: agentwire.OpForget, ID: fmt.Sprintf("bench-%d", seq)})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("agent channel: %w", err)
	}
	api, err := timeN(n, func() error {
		var out bytes.Buffer
		res, err := c.Exec(ctx, sb, client.ExecRequest{Argv: []string{"echo", "hi"}}, &out, nil)
		if err == nil && (res.ExitCode != 0 || out.String() != "hi\n" || res.Agent != runner.AgentName) {
			err = fmt.Errorf("echo: %+v %q", res, out.String())
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("control API: %w", err)
	}
	eng, err := podman.NewEngine(ctx, podmanSock)
	if err != nil {
		return err
	}
	papi, err := timeN(np, func() error {
		var out bytes.Buffer
		st, err := eng.Exec(ctx, ctr, runner.Process{Argv: []string{"echo", "hi"}, Stdout: &out, Stderr: io.Discard}, func() {})
		if err == nil && (st.Code != 0 || out.String() != "hi\n") {
			err = fmt.Errorf("echo: %+v %q", st, out.String())
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("podman API: %w", err)
	}
	row("agent channel (runner/agent), echo hi", direct)
	row("Go API: client.Exec via airlock serve + agent, echo hi", api)
	row("podman API exec (bindings), echo hi", papi)
	fmt.Printf("  %-52s %8.1fx  (target >= 40x)\n", "podman API p50 / Go API p50", float64(papi.pct(0.5))/float64(api.pct(0.5)))
	return nil
}

func files(ctx context.Context, c *client.Client, sb string, n int) error {
	mib := make([]byte, 1<<20)
	rand.Read(mib)
	kib := mib[:4096]
	rt := func(data []byte) func() error {
		return func() error {
			if _, err := c.WriteFile(ctx, sb, "/tmp/bench.bin", 0o644, int64(len(data)), bytes.NewReader(data)); err != nil {
				return err
			}
			var got bytes.Buffer
			if _, err := c.ReadFile(ctx, sb, "/tmp/bench.bin", &got); err != nil {
				return err
			}
			if !bytes.Equal(got.Bytes(), data) {
				return fmt.Errorf("read back %d bytes, not what was written", got.Len())
			}
			return nil
		}
	}
	m, err := timeN(max(20, n/10), rt(mib))
	if err != nil {
		return err
	}
	k, err := timeN(n, rt(kib))
	if err != nil {
		return err
	}
	row("Go API: 1 MiB write + read back (agent files)", m)
	row("Go API: 4 KiB write + read back (agent files)", k)
	fmt.Printf("MIB_P50_MS %.2f\n", ms(m.pct(0.5)))
	return nil
}

func concurrent(ctx context.Context, c *client.Client, sb string, k int) error {
	var wg sync.WaitGroup
	errs := make(chan error, k)
	t := time.Now()
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			want := fmt.Sprintf("cmd-%d\n", i)
			res, err := c.Exec(ctx, sb, client.ExecRequest{Argv: []string{"echo", strings.TrimSpace(want)}}, &out, nil)
			if err == nil && (res.ExitCode != 0 || out.String() != want) {
				err = fmt.Errorf("command %d: %+v %q", i, res, out.String())
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		if err == nil {
			ok++
		} else {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	fmt.Printf("  %-52s %8.1f ms   %d/%d intact\n", fmt.Sprintf("%d concurrent commands in one sandbox", k), ms(time.Since(t)), ok, k)
	if ok != k {
		return fmt.Errorf("%d of %d concurrent commands failed", k-ok, k)
	}
	return nil
}

func many(ctx context.Context, c *client.Client, sbs []string, k int) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, total := 0, 0
	t := time.Now()
	for _, sb := range sbs {
		for i := range k {
			wg.Add(1)
			total++
			go func() {
				defer wg.Done()
				var out bytes.Buffer
				want := sb + "-" + fmt.Sprint(i) + "\n"
				res, err := c.Exec(ctx, sb, client.ExecRequest{Shell: "echo $AIRLOCK_SANDBOX-" + fmt.Sprint(i)}, &out, nil)
				mu.Lock()
				defer mu.Unlock()
				if err == nil && res.ExitCode == 0 && out.String() == want {
					ok++
				} else {
					fmt.Fprintf(os.Stderr, "%s/%d: %v %+v %q\n", sb, i, err, res, out.String())
				}
			}()
		}
	}
	wg.Wait()
	fmt.Printf("  %-52s %8.1f ms   %d/%d intact\n", fmt.Sprintf("%d sandboxes x %d commands, all at once", len(sbs), k), ms(time.Since(t)), ok, total)
	if ok != total {
		return fmt.Errorf("%d of %d failed", total-ok, total)
	}
	return nil
}
