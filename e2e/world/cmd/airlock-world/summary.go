package main

import (
	"fmt"
	"strings"

	"airlock/e2e/world"
)

// maxPaths is how many distinct requests a server's line names.
const maxPaths = 5

// view is what a summary needs of a world.
type view struct {
	name  func(world.Role) string
	token string // the internal API's credential: compared, never printed
}

// Summarize says what reached each of w's servers, then whether anything
// that must never arrive did: a git push, a denied package, any record at
// the evil server or the canary, a packet from a foreign source.
func Summarize(w *world.World, recs []world.Record) string {
	return summarize(view{name: w.Name, token: w.APIToken}, recs)
}

func summarize(v view, recs []world.Record) string {
	var b strings.Builder
	b.WriteString("what reached the world (its servers' own records):\n")
	for _, r := range world.Roles {
		fmt.Fprintf(&b, "  %-26s %s\n", v.name(r), roleLine(v, r, recs))
	}
	b.WriteString(checks(v, recs))
	return b.String()
}

// roleLine describes the records of one role.
func roleLine(v view, role world.Role, recs []world.Record) string {
	var keys []string
	count := map[string]int{}
	for _, r := range recs {
		if r.Role != role {
			continue
		}
		k := recordKey(v, r)
		if count[k] == 0 {
			keys = append(keys, k)
		}
		count[k]++
	}
	if len(keys) == 0 {
		return "nothing"
	}
	var parts []string
	for i, k := range keys {
		if i == maxPaths {
			parts = append(parts, fmt.Sprintf("and %d more", len(keys)-maxPaths))
			break
		}
		if count[k] > 1 {
			k += fmt.Sprintf(" (x%d)", count[k])
		}
		parts = append(parts, k)
	}
	return strings.Join(parts, ", ")
}

// recordKey names a record the way a reader groups them.
func recordKey(v view, r world.Record) string {
	switch r.Kind {
	case world.KindHTTP:
		k := r.Method + " " + r.Path
		if r.Query != "" {
			k += "?" + r.Query
		}
		if r.Role == world.RoleAPI {
			k += credentialNote(v, r)
		}
		return k
	case world.KindDNS:
		return "DNS queries"
	case world.KindConn:
		return "connection to " + r.Local
	default:
		return r.Proto + " packet to " + r.Dst
	}
}

func credentialNote(v view, r world.Record) string {
	switch got := r.Header.Get("Authorization"); {
	case got == "":
		return " [no credential]"
	case v.token != "" && got == "Bearer "+v.token:
		return " [with the injected credential]"
	}
	return " [a wrong credential]"
}

// checks reports what must never have arrived, one line each.
func checks(v view, recs []world.Record) string {
	var pushes, packages, leaks []world.Record
	for _, r := range recs {
		switch {
		case world.Leaks(r):
			leaks = append(leaks, r)
		case r.Role == world.RoleGit && (strings.Contains(r.Path, "receive-pack") || strings.Contains(r.Query, "receive-pack")):
			pushes = append(pushes, r)
		case r.Kind == world.KindHTTP && world.Containing("stealer")(r):
			packages = append(packages, r)
		}
	}
	var b strings.Builder
	check(&b, pushes, "no git push arrived", "a git push arrived")
	check(&b, packages, "no denied package was served", "a denied package was requested")
	check(&b, leaks, fmt.Sprintf("nothing reached %s or %s, no foreign packet", v.name(world.RoleEvil), v.name(world.RoleCanary)),
		"a leak: something reached the evil server or the canary")
	return b.String()
}

func check(b *strings.Builder, bad []world.Record, ok, fail string) {
	if len(bad) == 0 {
		fmt.Fprintf(b, "  ok: %s\n", ok)
		return
	}
	fmt.Fprintf(b, "  LEAK: %s (%d records):\n", fail, len(bad))
	for _, r := range bad {
		fmt.Fprintf(b, "    %s\n", r)
	}
}
