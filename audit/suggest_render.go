package audit

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"airlock/policies"
)

var defaultQTypes = map[string]bool{"A": true, "AAAA": true, "CNAME": true, "HTTPS": true, "SVCB": true, "MX": true, "SRV": true}

func (s *suggester) render(q Query) (string, error) {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	sbs := slices.Sorted(maps.Keys(s.sandboxes))
	w("# Suggested by `airlock policy suggest` from %d recorded requests\n", s.events)
	w("# of sandbox(es) %s, %s .. %s.\n", dashIfEmpty(strings.Join(sbs, ", ")), s.from.UTC().Format(time.RFC3339), s.to.UTC().Format(time.RFC3339))
	w("# It allows exactly the destinations, methods and ports seen, nothing more. Review it.\n")
	if s.opt.Source == nil {
		w("# No source policy (--policy): kinds, routes, paths, inject, packages and [deny] are not known here.\n")
	}
	if s.opt.AllowWouldDeny {
		w("# --allow-would-deny: requests the policy would have denied are allowed below.\n")
	}
	if s.opt.AllowInternal {
		w("# --allow-internal-addrs: non-public addresses seen are allowed below.\n")
	}
	w("version = 1\nmode = \"enforce\"\n")
	w("description = %s\n", tomlString("suggested from "+describeScope(q, sbs)))
	gs, dnsOnly := s.groups()
	src, err := s.sourceSections(gs)
	if err != nil {
		return "", err
	}
	b.WriteString(src)
	for _, g := range gs {
		if !g.source {
			w("\n")
			renderGroup(&b, g)
		}
	}
	if len(dnsOnly) > 0 {
		w("\n# Looked up but never connected to (not allowed by this policy):\n")
		for _, u := range dnsOnly {
			w("#   %s (%s, %s)\n", u.host, strings.Join(slices.Sorted(maps.Keys(u.qtypes)), ","), plural(u.dns, "query", "queries"))
		}
	}
	if len(s.refused) > 0 {
		w("\n# Refused, and refused here too (add deliberately if needed):\n")
		for _, r := range s.refused {
			w("#   %s: %s\n", r.line, r.why)
		}
	}
	s.renderTests(&b)
	return b.String(), nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func describeScope(q Query, sbs []string) string {
	parts := []string{}
	if q.Sandbox != "" {
		parts = append(parts, "sandbox "+q.Sandbox)
	} else if len(sbs) > 0 {
		parts = append(parts, "sandboxes "+strings.Join(sbs, ", "))
	}
	if !q.Since.IsZero() {
		parts = append(parts, "since "+q.Since.UTC().Format(time.RFC3339))
	}
	if !q.Until.IsZero() {
		parts = append(parts, "until "+q.Until.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, ", ")
}

func renderGroup(b *strings.Builder, g *group) {
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	w("[categories.%s]\n", g.name)
	if g.kind != g.name {
		w("kind = %s\n", tomlString(g.kind))
	}
	var hosts []*hostUse
	addrs := map[netip.Addr]bool{}
	methods, ports, qtypes := map[string]bool{}, map[uint16]bool{}, map[string]bool{}
	var plain, push bool
	for _, u := range g.hosts {
		if u.host != "" {
			hosts = append(hosts, u)
		}
		for a := range u.addrs {
			addrs[a] = true
		}
		for m := range u.methods {
			methods[m] = true
		}
		for p := range u.ports {
			ports[p] = true
		}
		for t := range u.qtypes {
			qtypes[t] = true
		}
		plain, push = plain || u.http, push || u.push
	}
	if len(hosts) > 0 {
		w("hosts = [\n")
		for _, u := range hosts {
			w("  %s, # %s\n", tomlString(u.host), evidence(u))
		}
		w("]\n")
	}
	if len(addrs) > 0 {
		w("cidrs = %s # addresses seen (non-public ones must be named)\n", tomlList(sortedAddrs(addrs)))
		if why := riskyAddrs(addrs); why != "" {
			w("%s = true # --allow-internal-addrs: these cidrs reach %s\n", policies.HatchRiskyCIDRs, why)
		}
	}
	renderPorts(b, ports, plain)
	if !g.inspect {
		w("inspect = false # only spliced TLS was seen: decided on the server name\n")
	} else if len(methods) > 0 {
		w("methods = %s\n", tomlList(slices.Sorted(maps.Keys(methods))))
	}
	if g.inspect && needsRoutes(g) {
		w("# a request to these hosts was refused: only the paths seen are allowed\nroutes = [\n")
		for _, r := range routesFor(g) {
			w("  %s,\n", r)
		}
		w("]\n")
	}
	if push {
		w("push = true # git-receive-pack was seen\n")
	}
	var extra []string
	for t := range qtypes {
		if !defaultQTypes[t] {
			extra = append(extra, t)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		w("dns_types = %s\n", tomlList(extra))
	}
}

func renderPorts(b *strings.Builder, ports map[uint16]bool, plain bool) {
	if plain {
		fmt.Fprintf(b, "http = true # plain http was seen\n")
	}
	var other bool
	for p := range ports {
		other = other || (p != 443 && !(plain && p == 80))
	}
	if !other {
		return
	}
	list := make([]int, 0, len(ports))
	for p := range ports {
		list = append(list, int(p))
	}
	sort.Ints(list)
	strs := make([]string, len(list))
	for i, p := range list {
		strs[i] = strconv.Itoa(p)
	}
	fmt.Fprintf(b, "ports = [%s]\n", strings.Join(strs, ", "))
}

func evidence(u *hostUse) string {
	var parts []string
	if u.requests > 0 {
		parts = append(parts, fmt.Sprintf("%s (%s)", plural(u.requests, "request", "requests"), strings.Join(slices.Sorted(maps.Keys(u.methods)), ",")))
	}
	if u.flows > 0 {
		parts = append(parts, plural(u.flows, "connection", "connections"))
	}
	if u.dns > 0 {
		parts = append(parts, plural(u.dns, "DNS query", "DNS queries"))
	}
	if len(u.samples) > 0 {
		parts = append(parts, "e.g. "+strings.Join(u.samples, ", "))
	}
	if len(u.pkgs) > 0 {
		parts = append(parts, "packages "+strings.Join(u.pkgs, ", "))
	}
	parts = append(parts, u.first.UTC().Format("15:04:05")+".."+u.last.UTC().Format("15:04:05"))
	return strings.NewReplacer("\n", " ", "\r", " ").Replace(strings.Join(parts, "; "))
}

func sortedAddrs(m map[netip.Addr]bool) []string {
	list := make([]netip.Addr, 0, len(m))
	for a := range m {
		list = append(list, a)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Less(list[j]) })
	out := make([]string, len(list))
	for i, a := range list {
		out[i] = a.String()
	}
	return out
}
