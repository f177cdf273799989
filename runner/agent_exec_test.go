package runner

import (
	"strings"
	"testing"
)

func TestHeadTailBoundsAndRedacts(t *testing.T) {
	secret := "s3cr3t-v4lue"
	for _, tc := range []struct {
		name       string
		writes     []string
		head, tail string
		n          int
	}{
		{"short, whole in the head", []string{"a " + secret + " b"}, "a [REDACTED] b", "", 1},
		{"secret split across writes", []string{"x s3cr", "3t-v4lue y"}, "x [REDACTED] y", "", 1},
		{"secret across the head's edge", []string{strings.Repeat("h", 10) + secret + strings.Repeat("m", 300) + secret}, "", "", 2},
	} {
		h := &headTail{max: 16}
		for _, w := range tc.writes {
			h.Write([]byte(w))
		}
		head, tail, n := h.render([]string{secret})
		if tc.name == "secret across the head's edge" {
			if strings.Contains(head+tail, "s3cr") || strings.Contains(head+tail, "v4lue") || n != 2 || len(head) > 16 || len(tail) > 16 {
				t.Errorf("%s: %q %q %d", tc.name, head, tail, n)
			}
			continue
		}
		if head != tc.head || tail != tc.tail || n != tc.n {
			t.Errorf("%s: %q %q %d, want %q %q %d", tc.name, head, tail, n, tc.head, tc.tail, tc.n)
		}
	}
	// A flood keeps only max+margin bytes at each end.
	h := &headTail{max: EventOutputMax}
	chunk := []byte(strings.Repeat("z", 64<<10))
	for range 1 << 10 { // 64 MiB
		h.Write(chunk)
	}
	if len(h.head) > EventOutputMax+tailMargin || len(h.tail) > EventOutputMax+tailMargin || h.total != 64<<20 {
		t.Fatalf("kept %d + %d bytes of %d", len(h.head), len(h.tail), h.total)
	}
	head, tail, _ := h.render(nil)
	if len(head) != EventOutputMax || len(tail) != EventOutputMax {
		t.Fatalf("rendered %d + %d", len(head), len(tail))
	}
}

func TestRedactLongestFirstAndShortValuesIgnored(t *testing.T) {
	rr := &Runner{cfg: Config{SecretValues: func(string) []string { return []string{"abc", "token", "token-long"} }}}
	s := rr.secrets("x")
	if len(s) != 2 || s[0] != "token-long" {
		t.Fatalf("secrets %q: want the long one first and no 3-byte value", s)
	}
	got, n := redact("a token-long and a token", s)
	if got != "a [REDACTED] and a [REDACTED]" || n != 2 {
		t.Fatalf("%q %d", got, n)
	}
}

// With the agent, the sandbox's PID 1 is airlock-init from a read-only
// bind of its directory, with no other init, and the container says so.
func TestBuildSpecWithAgent(t *testing.T) {
	s := BuildSpec(SpecInput{ID: "x", Req: CreateRequest{Image: "i", Policy: "p"}, AgentDir: "/state/agent/abc"})
	if len(s.Entrypoint) != 1 || s.Entrypoint[0] != AgentEntrypoint || s.Command != nil || s.Init || s.Labels[LabelAgent] != AgentName {
		t.Fatalf("spec: entrypoint %q command %q init %t labels %v", s.Entrypoint, s.Command, s.Init, s.Labels)
	}
	var found bool
	for _, m := range s.Mounts {
		if m.Destination == AgentMountDir {
			found = m.Source == "/state/agent/abc" && m.Type == "bind" && len(m.Options) == 1 && m.Options[0] == "ro"
		}
	}
	if !found {
		t.Fatalf("no read-only bind of the agent dir: %+v", s.Mounts)
	}
	if def := BuildSpec(SpecInput{ID: "x", Req: CreateRequest{Image: "i", Policy: "p"}}); def.Entrypoint != nil || !def.Init || def.Labels[LabelAgent] != "" {
		t.Fatalf("without the agent: %+v", def)
	}
}
