package audit

import (
	"net/netip"
	"sort"
	"strings"
	"time"

	"airlock/policies"
)

// Severity orders denials for a responder: 1 first.
const (
	SevCritical = 1 // metadata and link-local, private ranges, credential leaks, spoofing
	SevHigh     = 2 // git push, DNS exfiltration guards
	SevNormal   = 3 // every other denial
)

// severityNames label the tiers in the report.
var severityNames = map[int]string{SevCritical: "critical", SevHigh: "high", SevNormal: "denied"}

// rankDenial says how serious a denied event is, and why.
func rankDenial(e *Event) (int, string) {
	if why := criticalWhy(e); why != "" {
		return SevCritical, why
	}
	if why := highWhy(e); why != "" {
		return SevHigh, why
	}
	return SevNormal, "denied by policy"
}

func criticalWhy(e *Event) string {
	switch {
	case e.Kind == KindSecretReflected || e.Rule == "proxy.reflect":
		return "credential leak: an injected secret came back"
	case e.HTTP != nil && e.HTTP.Secret != "", e.Rule == "proxy.sentinel":
		return "credential leak: a secret sent to a host it is not for"
	case strings.HasPrefix(e.Rule, "kernel:spoofed-"):
		return "spoofing: " + strings.TrimPrefix(e.Rule, "kernel:")
	case e.Rule == "proxy.fronting", e.Rule == "proxy.identity", e.Flow != nil && e.Flow.Mismatch:
		return "spoofing: the name does not match the address"
	}
	for _, a := range destAddrs(e) {
		switch policies.Classify(a) {
		case policies.ClassLinkLocal:
			if a == netip.AddrFrom4([4]byte{169, 254, 169, 254}) {
				return "cloud metadata service"
			}
			return "link-local address (metadata range)"
		case policies.ClassLoopback, policies.ClassPrivate, policies.ClassCGNAT, policies.ClassUnspecified:
			return "private address range"
		}
	}
	if e.Rule == "proxy.address" {
		return "private address range"
	}
	return ""
}

func highWhy(e *Event) string {
	switch {
	case strings.HasSuffix(ruleName(e.Rule), ".push"),
		e.HTTP != nil && strings.HasSuffix(e.HTTP.Path, "/git-receive-pack"):
		return "git push"
	case e.DNS != nil && e.DNS.Guard != "", strings.HasPrefix(e.Rule, "dns."):
		return "DNS exfiltration guard"
	}
	return ""
}

// ruleName is a rule without its " (file:line:col)".
func ruleName(rule string) string {
	name, _, _ := strings.Cut(rule, " (")
	return name
}

// destAddrs are the literal destination addresses an event names.
func destAddrs(e *Event) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(hostOnly(s)); err == nil {
			out = append(out, a.Unmap())
		}
	}
	add(Host(e))
	switch {
	case e.Flow != nil:
		add(e.Flow.OrigDst)
		add(e.Flow.Dialed)
	case e.Drop != nil:
		add(e.Drop.Dest)
	case e.DNS != nil:
		for _, s := range e.DNS.Stripped {
			add(s)
		}
	}
	return out
}

// sortDenials orders by severity, then attempts, then first time.
func sortDenials(ds []Denial) {
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := ds[i], ds[j]
		if a.Severity != b.Severity {
			return a.Severity < b.Severity
		}
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.First.Before(b.First)
	})
}

// Attribution says how a denial was linked to a command.
const (
	// AttrExecID: an attempt's event names the command whose process made
	// it (its exec_id, found by the sandbox's agent from the socket).
	AttrExecID = "made it"
	// AttrAgentInferred: the socket was gone when the agent looked; the
	// command is the only one that was running then.
	AttrAgentInferred = "the only command running"
	// AttrRunning: no attempt names its command (no agent, or it could not
	// tell): the command running at the time of the first attempt, an
	// inference from times.
	AttrRunning = "running at the time"
	// AttrNone: no command was running (setup, or between commands).
	AttrNone = ""
)

// attribute links each denial to its command: the one its events name,
// else the command running when it was first attempted (the
// latest-started command whose run covers that time).
func attribute(ds []Denial, cmds []Command, end time.Time) {
	for i := range ds {
		d := &ds[i]
		if d.CommandID != "" {
			if c := commandByID(cmds, d.CommandID); c != nil {
				d.Command = c.Argv
				continue
			}
			d.CommandID, d.Attribution = "", "" // a command outside the report's records
		}
		var best *Command
		for j := range cmds {
			c := &cmds[j]
			stop := c.End
			if stop.IsZero() {
				stop = end
			}
			if !d.First.Before(c.Start) && (stop.IsZero() || !d.First.After(stop)) {
				if best == nil || c.Start.After(best.Start) {
					best = c
				}
			}
		}
		if best != nil {
			d.CommandID, d.Command, d.Attribution = best.ID, best.Argv, AttrRunning
		}
	}
}

func commandByID(cmds []Command, id string) *Command {
	for i := range cmds {
		if cmds[i].ID == id {
			return &cmds[i]
		}
	}
	return nil
}
