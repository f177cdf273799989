package bpf

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// emittedRules are the kernel rule names AuditEvent can put in a record.
func emittedRules() []string {
	var out []string
	for r := ReasonNone + 1; r < reasonMax; r++ {
		out = append(out, AuditEvent(Drop{Reason: r}).Rule)
	}
	return append(out, AuditEvent(Drop{Reason: ReasonRateLimited}).Rule)
}

// docs/events.md lists every kernel rule the code emits, and no page of
// the documentation names a kernel rule that does not exist (the review
// found `bpf.udp` in the docs, which `--rule` never matched).
func TestDocsNameTheEmittedKernelRules(t *testing.T) {
	emitted := emittedRules()
	events, err := os.ReadFile("../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range emitted {
		if !strings.Contains(string(events), "| `"+rule+"` |") {
			t.Errorf("docs/events.md has no table row for the kernel rule %s", rule)
		}
	}
	pages, _ := os.ReadDir("../docs")
	files := []string{"../README.md", "README.md"}
	for _, p := range pages {
		if strings.HasSuffix(p.Name(), ".md") {
			files = append(files, "../docs/"+p.Name())
		}
	}
	named := regexp.MustCompile("`(kernel:[a-z0-9-]+|bpf\\.[a-z0-9-]+)[` ]")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(b), -1) {
			if !slices.Contains(emitted, m[1]) {
				t.Errorf("%s names the kernel rule %s, which the code never emits", f, m[1])
			}
		}
	}
}

// The drop table in bpf/README.md names only reasons that exist.
func TestReadmeDropReasonsExist(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	emitted := emittedRules()
	for _, m := range regexp.MustCompile("drop `([a-z0-9-]+)`((?: / `[a-z0-9-]+`)*)").FindAllStringSubmatch(string(b), -1) {
		names := []string{m[1]}
		for _, n := range regexp.MustCompile("`([a-z0-9-]+)`").FindAllStringSubmatch(m[2], -1) {
			names = append(names, n[1])
		}
		for _, n := range names {
			if !slices.Contains(emitted, "kernel:"+n) {
				t.Errorf("bpf/README.md names the drop reason %q, which the code never emits", n)
			}
		}
	}
}
