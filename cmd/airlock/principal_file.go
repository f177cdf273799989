//go:build !airlock_thin

package main

import (
	"fmt"
	"sort"
	"strings"

	"airlock/serve"
)

// principalTOML renders a [principals.NAME] table from the add flags.
func principalTOML(name, hash string) string {
	f := principalFlags
	var b strings.Builder
	fmt.Fprintf(&b, "\n[principals.%s]\ntoken_sha256 = %q\nscopes = %s\n", name, hash, tomlList(f.scopes))
	var q []string
	if f.sandboxes != 0 {
		q = append(q, fmt.Sprintf("sandboxes = %d", f.sandboxes))
	}
	if f.maxLifetime != 0 {
		q = append(q, fmt.Sprintf("max_lifetime = %q", f.maxLifetime))
	}
	if f.maxExec != 0 {
		q = append(q, fmt.Sprintf("max_exec_timeout = %q", f.maxExec))
	}
	if len(f.policies) > 0 {
		q = append(q, "policies = "+tomlList(f.policies))
	}
	if len(f.images) > 0 {
		q = append(q, "images = "+tomlList(f.images))
	}
	if len(q) > 0 {
		fmt.Fprintf(&b, "\n[principals.%s.quota]\n%s\n", name, strings.Join(q, "\n"))
	}
	return b.String()
}

func tomlList(xs []string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%q", strings.TrimSpace(x))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// removeTable drops [principals.NAME] and its sub-tables (up to the next
// table header of anything else); every other line, comments included,
// stays.
func removeTable(src []byte, name string) []byte {
	own := func(h string) bool {
		return h == "principals."+name || strings.HasPrefix(h, "principals."+name+".")
	}
	var out []string
	skipping := false
	for _, line := range strings.SplitAfter(string(src), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "[") {
			h := strings.Trim(strings.TrimSpace(strings.SplitN(strings.Trim(t, "[]"), "#", 2)[0]), "[] ")
			h = strings.ReplaceAll(strings.ReplaceAll(h, " ", ""), `"`, "")
			skipping = own(h)
		}
		if !skipping {
			out = append(out, line)
		}
	}
	return []byte(strings.Join(out, ""))
}

func sortedNames(pf *serve.PrincipalsFile) []string {
	out := make([]string, 0, len(pf.Principals))
	for n := range pf.Principals {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func quotaString(q serve.Quota) string {
	var parts []string
	if q.Sandboxes > 0 {
		parts = append(parts, fmt.Sprintf("sandboxes=%d", q.Sandboxes))
	}
	if q.MaxLifetime.Duration > 0 {
		parts = append(parts, "max_lifetime="+q.MaxLifetime.String())
	}
	if q.MaxExecTimeout.Duration > 0 {
		parts = append(parts, "max_exec_timeout="+q.MaxExecTimeout.String())
	}
	if len(q.Policies) > 0 {
		parts = append(parts, "policies="+strings.Join(q.Policies, ","))
	}
	if len(q.Images) > 0 {
		parts = append(parts, "images="+strings.Join(q.Images, ","))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
