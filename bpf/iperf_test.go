package bpf

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"airlock/internal/tproxy"
)

const iperfEnv = "AIRLOCK_BENCH_IPERF"

// TestIperfThroughput is the side-by-side throughput comparison run by
// bench/bpf.sh (it only runs with AIRLOCK_BENCH_IPERF=1, and asserts nothing
// about speed): iperf3 from a sandbox netns whose veth carries the program,
// steered to a plain splice listener, versus iperf3 from an identical netns
// without the program reaching the same listener at the gateway address.
// Both end at the same iperf3 server on loopback behind the listener.
func TestIperfThroughput(t *testing.T) {
	if os.Getenv(iperfEnv) == "" {
		t.Skip("skipping: throughput comparison; run bench/bpf.sh (sets " + iperfEnv + "=1)")
	}
	requireRoot(t)
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("skipping: iperf3 not installed (apt-get install iperf3)")
	}
	secs, rounds := envInt("AIRLOCK_BENCH_SECONDS", 2), envInt("AIRLOCK_BENCH_ROUNDS", 6)
	p := openTest(t, Options{})
	c := pickSubnet(t)
	gw, steeredAddr, plainAddr, dst := ip(c, 1), ip(c, 2), ip(c, 3), ip(c, 200)

	steered := newNS(t, "perfs")
	es := newEndpoint(t, steered, p.opts.Guard.IfacePrefix+"s", steeredAddr, gw, nil)
	if _, err := p.Attach(es.hostIdx, SandboxNet{Sandbox: SandboxID{Num: 9, Name: "perf"}, Addr: steeredAddr, MAC: es.peerMAC, Gateway: gw}); err != nil {
		t.Fatalf("Attach: %+v", err)
	}
	es.up(t)
	plain := newNS(t, "perfp")
	ep := newEndpoint(t, plain, "ap"+randHex(3), plainAddr, gw, nil) // no guarded prefix, no program
	ep.up(t)

	server := startIperfServer(t)
	relay, err := tproxy.ListenTCP(context.Background(), netip.AddrPortFrom(gw, 0).String())
	must(t, err)
	t.Cleanup(func() { relay.Close() })
	go spliceRelay(relay, server)
	must(t, p.SetProxyListener(relay))
	relayPort := uint16(relay.Addr().(*net.TCPAddr).Port)

	// Paired rounds in ABBA order; the median of the per-round ratios is
	// the figure least moved by other load on a shared machine.
	var with, without, ratios []float64
	for round := range rounds {
		var w, o float64
		if round%2 == 0 {
			w = runIperf(t, steered, netip.AddrPortFrom(dst, 5201), secs)
			o = runIperf(t, plain, netip.AddrPortFrom(gw, relayPort), secs)
		} else {
			o = runIperf(t, plain, netip.AddrPortFrom(gw, relayPort), secs)
			w = runIperf(t, steered, netip.AddrPortFrom(dst, 5201), secs)
		}
		with, without, ratios = append(with, w), append(without, o), append(ratios, w/o)
		t.Logf("round %d: with program %.2f Gbit/s, without %.2f Gbit/s, ratio %.3f", round+1, w/1e9, o/1e9, w/o)
	}
	fmt.Printf("iperf3 %d rounds x %ds each way, interleaved: with program median %.2f Gbit/s, without %.2f Gbit/s; median ratio %.3f, ratio of medians %.3f\n",
		rounds, secs, median(with)/1e9, median(without)/1e9, median(ratios), median(with)/median(without))
	if s, err := p.Stats(9); err == nil {
		t.Logf("program counters: %+v", s)
		if s.Passed.TCPProxy == 0 || s.Passed.TCPOwned == 0 {
			t.Errorf("the steered run did not pass through the program: %+v", s)
		}
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func startIperfServer(t *testing.T) string {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().(*net.TCPAddr)
	l.Close()
	cmd := exec.Command("iperf3", "-s", "-B", "127.0.0.1", "-p", strconv.Itoa(addr.Port))
	must(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp4", addr.String()); err == nil {
			c.Close()
			return addr.String()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("iperf3 server did not start")
	return ""
}

// spliceRelay copies each accepted connection to upstream both ways
// (TCPConn to TCPConn: the kernel splices).
func spliceRelay(l *net.TCPListener, upstream string) {
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp4", upstream)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{})
			go func() {
				io.Copy(u, c)
				u.(*net.TCPConn).CloseWrite()
				close(done)
			}()
			io.Copy(c, u)
			c.CloseWrite()
			<-done
		}()
	}
}

func runIperf(t *testing.T, n *ns, dst netip.AddrPort, secs int) float64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", n.name, "iperf3", "-J", "-O", "1",
		"-t", strconv.Itoa(secs+1), "-c", dst.Addr().String(), "-p", strconv.Itoa(int(dst.Port()))).Output()
	if err != nil {
		t.Fatalf("iperf3 to %s from %s: %v\n%s", dst, n.name, err, out)
	}
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("iperf3 output: %v", err)
	}
	return r.End.SumReceived.BitsPerSecond
}
