package audit

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestSandboxStatesDocumented: docs/api.md ("Sandbox states") and the
// lifecycle.state row of docs/events.md list exactly SandboxStates, in
// order.
func TestSandboxStatesDocumented(t *testing.T) {
	var want []string
	for _, s := range SandboxStates() {
		want = append(want, string(s))
	}
	api := readDoc(t, "../docs/api.md")
	sec := between(t, api, "## Sandbox states\n", "\n## ")
	var got []string
	for _, m := range regexp.MustCompile("(?m)^- `([^`]+)`:").FindAllStringSubmatch(sec, -1) {
		got = append(got, m[1])
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/api.md, Sandbox states, lists %q; the code has %q", got, want)
	}
	ev := readDoc(t, "../docs/events.md")
	row := between(t, ev, "| `lifecycle.state` | string | the sandbox's state once this record is written: ", " (docs/api.md")
	got = nil
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(row, -1) {
		got = append(got, m[1])
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/events.md, lifecycle.state, lists %q; the code has %q", got, want)
	}
}

// TestSandboxStateFromOlderAppliance: a client reads an older
// appliance's names as the states they are now, and keeps a name it does
// not know.
func TestSandboxStateFromOlderAppliance(t *testing.T) {
	for in, want := range map[string]SandboxState{`"destroying"`: StateEnding, `"destroy-failed"`: StateEnding,
		`"running"`: StateRunning, `"ended"`: StateEnded, `"hibernating"`: "hibernating"} {
		var got struct {
			State SandboxState `json:"state"`
		}
		if err := json.Unmarshal([]byte(`{"state":`+in+`}`), &got); err != nil || got.State != want {
			t.Errorf("%s: %q %v, want %q", in, got.State, err, want)
		}
	}
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func between(t *testing.T, s, from, to string) string {
	t.Helper()
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		t.Fatalf("no %q", from)
	}
	out, _, _ := strings.Cut(rest, to)
	return out
}

// TestReportStateAndPrincipal: the report shows a sandbox's state from
// its last lifecycle record (a files record does not stand for one), and
// --principal finds the lifecycle and exec records a principal's requests
// made.
func TestReportStateAndPrincipal(t *testing.T) {
	lc := func(stage string, st SandboxState, by string) Event {
		e := New(KindLifecycle, "sb-9")
		e.Lifecycle = &Lifecycle{Stage: stage, State: st, Principal: by}
		return e
	}
	x := New(KindExec, "sb-9")
	x.Exec = &Exec{Stage: "requested", Argv: []string{"true"}, Principal: "alice"}
	evs := []Event{lc("created", StateCreating, "alice"), lc("ready", StateRunning, "alice"), x,
		lc("files", StateRunning, "alice"), lc("paused", StatePaused, "root-admin")}
	r, err := BuildReport(context.Background(), storeOf(t, evs), "sb-9")
	if err != nil || r.State != "paused" {
		t.Fatalf("report state %q %v", r.State, err)
	}
	f := Filter{Match: Fields{Principal: []string{"alice"}}}
	n := 0
	for _, e := range evs {
		if f.Matches(&e) {
			n++
		}
	}
	if n != 4 {
		t.Errorf("--principal alice matched %d records, want 4", n)
	}
}
