// Command dns is the Go side of bench/dns.sh: a loopback test zone that
// answers every name under bench.test, and dnsd in front of it with a policy
// that allows bench.test and denies everything else.
//
//	go run ./bench/dns upstream -addr 127.0.0.1:15353
//	go run ./bench/dns dnsd -addr 127.0.0.1:15354 -upstream 127.0.0.1:15353
//	go run ./bench/dns latency -addr 127.0.0.1:15354 -qps 50000
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"airlock/audit"
	"airlock/dnsd"
	"airlock/policies"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dns upstream|dnsd|latency|echo|stalls [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "upstream":
		err = upstream(ctx, os.Args[2:])
	case "dnsd":
		err = runDNSD(ctx, os.Args[2:])
	case "latency":
		err = latency(ctx, os.Args[2:])
	case "echo":
		err = echo(ctx, os.Args[2:])
	case "stalls":
		err = stalls(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dns:", err)
		os.Exit(1)
	}
}

// upstream serves A 1.2.3.4 (TTL 3600) for every name under bench.test.
func upstream(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:15353", "UDP address")
	_ = fs.Parse(args)
	pc, err := net.ListenPacket("udp", *addr)
	if err != nil {
		return err
	}
	a := net.IPv4(1, 2, 3, 4).To4()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		if q := r.Question[0]; q.Qtype == dns.TypeA && strings.HasSuffix(strings.ToLower(q.Name), "bench.test.") {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 3600}, A: a}}
		}
		_ = w.WriteMsg(m)
	})
	srv := &dns.Server{PacketConn: pc, Handler: h}
	go func() { <-ctx.Done(); _ = srv.Shutdown() }()
	return srv.ActivateAndServe()
}

// benchPolicy allows the test zone and nothing else.
const benchPolicy = `version = 1
[categories.bench]
kind = "public_web"
hosts = ["*.bench.test"]
`

type counter struct{ n atomic.Int64 }

func (c *counter) Emit(audit.Event) { c.n.Add(1) }

func runDNSD(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dnsd", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:15354", "UDP and TCP address")
	up := fs.String("upstream", "127.0.0.1:15353", "upstream")
	cache := fs.Int("cache", 100000, "cache entries")
	socks := fs.Int("sockets", 0, "SO_REUSEPORT UDP sockets (0: dnsd's default)")
	cpuprof := fs.String("cpuprofile", "", "write a CPU profile here")
	traceOut := fs.String("trace", "", "write an execution trace here")
	_ = fs.Parse(args)
	if *traceOut != "" {
		f, err := os.Create(*traceOut)
		if err != nil {
			return err
		}
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	u, err := dnsd.ParseUpstream(*up)
	if err != nil {
		return err
	}
	pol, err := policies.Parse("bench.toml", []byte(benchPolicy))
	if err != nil {
		return err
	}
	sb := dnsd.Sandbox{ID: "bench", Policy: pol}
	ev := &counter{}
	s, err := dnsd.New(dnsd.Config{
		Listen:     []string{*addr},
		UDPSockets: *socks,
		Identifier: dnsd.IdentifierFunc(func(netip.Addr) (dnsd.Sandbox, bool) { return sb, true }),
		Emitter:    ev, // counts; the audit pipeline's cost is not part of this measurement
		Upstreams:  []dnsd.Upstream{u},
		CacheSize:  *cache,
		// The bench names all resolve to 1.2.3.4: bind them briefly.
		BindingsGrace: time.Second,
	})
	if err != nil {
		return err
	}
	defer func() { fmt.Fprintf(os.Stderr, "dnsd: %d events\n", ev.n.Load()) }()
	go memReport(ctx)
	return s.Serve(ctx)
}

// memReport prints the Go heap on SIGUSR1, after a collection, so the
// script can set RSS against the live heap: "mem live=N goal=N stacks=N
// sys=N" in bytes.
func memReport(ctx context.Context) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c:
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Fprintf(os.Stderr, "mem live=%d goal=%d stacks=%d sys=%d\n", ms.HeapAlloc, ms.NextGC, ms.StackInuse, ms.Sys)
		}
	}
}
