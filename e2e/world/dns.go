package world

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// zone is the world's authoritative data for .test.
type zone struct {
	a      map[string][]netip.Addr
	exfil  netip.Addr // answer for any name under ExfilZone
	exfil6 netip.Addr
}

func (w *World) zone() *zone {
	z := &zone{a: make(map[string][]netip.Addr), exfil: w.addrs[RoleEvil], exfil6: w.addrs6[RoleEvil]}
	for _, r := range Roles {
		for _, n := range w.names[r] {
			z.add(n, w.addrs[r], w.addrs6[r])
		}
	}
	for n, a := range RebindNames {
		z.add(n, a)
	}
	for n, as := range w.extra {
		z.add(strings.TrimSuffix(strings.ToLower(n), "."), as...)
	}
	return z
}

func (z *zone) add(name string, addrs ...netip.Addr) {
	for _, a := range addrs {
		if a.IsValid() {
			z.a[name] = append(z.a[name], a)
		}
	}
}

// lookup returns the addresses of name; ok is false for NXDOMAIN.
func (z *zone) lookup(name string) ([]netip.Addr, bool) {
	n := strings.TrimSuffix(strings.ToLower(name), ".")
	if a, ok := z.a[n]; ok {
		return a, true
	}
	for _, wz := range WildcardZones {
		if strings.HasSuffix(n, "."+wz) {
			return []netip.Addr{z.exfil, z.exfil6}, true
		}
	}
	return nil, false
}

const zoneApex = "test."

func soa() dns.RR {
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: zoneApex, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
		Ns:      "ns.world.test.",
		Mbox:    "hostmaster.world.test.",
		Serial:  1,
		Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 30,
	}
}

// dnsHandler answers one query from the zone and records it.
func (w *World) dnsHandler(z *zone, proto string) dns.HandlerFunc {
	return func(rw dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		if len(q.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
			_ = rw.WriteMsg(m)
			return
		}
		qq := q.Question[0]
		w.log.add(Record{
			Kind: KindDNS, Role: RoleDNS, Proto: proto,
			Remote: rw.RemoteAddr().String(), Local: rw.LocalAddr().String(),
			QName: qq.Name, QType: dns.TypeToString[qq.Qtype],
		})
		answer(m, z, qq)
		_ = rw.WriteMsg(m)
	}
}

func answer(m *dns.Msg, z *zone, qq dns.Question) {
	if !dns.IsSubDomain(zoneApex, strings.ToLower(qq.Name)) {
		m.Rcode = dns.RcodeRefused
		m.Authoritative = false
		return
	}
	addrs, ok := z.lookup(qq.Name)
	if !ok {
		m.Rcode = dns.RcodeNameError
		m.Ns = append(m.Ns, soa())
		return
	}
	hdr := dns.RR_Header{Name: qq.Name, Class: dns.ClassINET, Ttl: 30}
	for _, a := range addrs {
		switch {
		case qq.Qtype == dns.TypeA && a.Is4():
			h := hdr
			h.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: h, A: net.IP(a.AsSlice())})
		case qq.Qtype == dns.TypeAAAA && a.Is6():
			h := hdr
			h.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: h, AAAA: net.IP(a.AsSlice())})
		}
	}
	if qq.Qtype == dns.TypeTXT {
		h := hdr
		h.Rrtype = dns.TypeTXT
		m.Answer = append(m.Answer, &dns.TXT{Hdr: h, Txt: []string{"world-txt " + strings.ToLower(qq.Name)}})
	}
	if len(m.Answer) == 0 {
		m.Ns = append(m.Ns, soa())
	}
}

// startDNS serves the zone on the DNS role's addresses, UDP and TCP.
func (w *World) startDNS() error {
	z := w.zone()
	for _, a := range []netip.Addr{w.addrs[RoleDNS], w.addrs6[RoleDNS]} {
		if !a.IsValid() {
			continue
		}
		ap := netip.AddrPortFrom(a, 53).String()
		var pc net.PacketConn
		var ln net.Listener
		err := inNS(w.ns.handle, func() error {
			var err error
			if pc, err = net.ListenPacket("udp", ap); err != nil {
				return fmt.Errorf("world: dns udp %s: %w", ap, err)
			}
			if ln, err = net.Listen("tcp", ap); err != nil {
				pc.Close()
				return fmt.Errorf("world: dns tcp %s: %w", ap, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := w.serveDNS(&dns.Server{PacketConn: pc, Handler: w.dnsHandler(z, "udp")}); err != nil {
			return err
		}
		if err := w.serveDNS(&dns.Server{Listener: ln, Handler: w.dnsHandler(z, "tcp"), ReadTimeout: 5 * time.Second}); err != nil {
			return err
		}
	}
	return nil
}

func (w *World) serveDNS(s *dns.Server) error {
	started := make(chan struct{})
	failed := make(chan error, 1)
	s.NotifyStartedFunc = func() { close(started) }
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := s.ActivateAndServe(); err != nil {
			failed <- err
			w.logger.Debug("world dns stopped", "err", err)
		}
	}()
	select {
	case <-started:
		w.addCloser(closerFunc(s.Shutdown))
		return nil
	case err := <-failed:
		return fmt.Errorf("world: dns: %w", err)
	}
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
