//go:build !airlock_thin

package main

import (
	"time"

	"github.com/spf13/pflag"

	"airlock/audit"
)

// eventFlags are the filters of `airlock logs` and `logs top`: every one
// repeatable (any value may match) and negatable (--not-NAME: no value may
// match), combined with AND.
type eventFlags struct {
	match, not   audit.Fields
	since, until string
}

func (f *eventFlags) add(fs *pflag.FlagSet) {
	for _, fl := range []struct {
		name string
		dst  *[]string
		not  *[]string
		help string
	}{
		{"sandbox", &f.match.Sandbox, &f.not.Sandbox, "sandbox id, or a prefix of one"},
		{"kind", &f.match.Kind, &f.not.Kind, "event kind: dns, flow, http, drop, exec, lifecycle, policy, approval, gap, audit_error, secret_reflected, lockdown, refusal, preview, ingress"},
		{"verdict", &f.match.Verdict, &f.not.Verdict, "verdict: allow, deny, ask, audit or would_deny"},
		{"category", &f.match.Category, &f.not.Category, "the category that decided"},
		{"rule", &f.match.Rule, &f.not.Rule, "the rule that decided, with or without its (file:line:col), e.g. deny.hosts[0] or kernel:udp-not-dns"},
		{"host", &f.match.Host, &f.not.Host, "destination glob, e.g. '*.example.test'"},
		{"method", &f.match.Method, &f.not.Method, "HTTP method"},
		{"path", &f.match.Path, &f.not.Path, "HTTP path glob; a trailing /** matches everything below"},
		{"port", &f.match.Port, &f.not.Port, "destination port N or range LO-HI"},
		{"status", &f.match.Status, &f.not.Status, "HTTP status, e.g. 403 or 4xx"},
		{"package", &f.match.Package, &f.not.Package, "package name glob, or ECOSYSTEM:NAME (npm:left-pad)"},
		{"exec", &f.match.ExecID, &f.not.ExecID, "exec id (only exec records carry one today)"},
		{"principal", &f.match.Principal, &f.not.Principal, "principal a refusal, lifecycle or exec record names"},
	} {
		fs.StringArrayVar(fl.dst, fl.name, nil, "only this "+fl.help+" (repeatable)")
		fs.StringArrayVar(fl.not, "not-"+fl.name, nil, "not this "+fl.name+" (repeatable)")
	}
	fs.StringVar(&f.since, "since", "", "from this time: a duration back (24h, 90m, 7d) or an RFC 3339 timestamp")
	fs.StringVar(&f.until, "until", "", "before this time: a duration back or an RFC 3339 timestamp")
}

// filter turns the flags into a checked filter.
func (f *eventFlags) filter(now time.Time) (*audit.Filter, error) {
	out := &audit.Filter{Match: f.match, Not: f.not}
	var err error
	if out.Since, err = audit.ParseTime(f.since, now); err != nil {
		return nil, usagef("--since: %w", err)
	}
	if out.Until, err = audit.ParseTime(f.until, now); err != nil {
		return nil, usagef("--until: %w", err)
	}
	if err := out.Validate(); err != nil {
		return nil, usageError{err}
	}
	return out, nil
}
