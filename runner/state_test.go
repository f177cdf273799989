package runner

import (
	"slices"
	"testing"

	"airlock/audit"
)

// TestPhaseStates: every phase of the runner shows one of the documented
// states (a warm pool member, not a sandbox yet, none).
func TestPhaseStates(t *testing.T) {
	for p, want := range map[phase]State{phaseCreating: audit.StateCreating, phaseRunning: audit.StateRunning, phasePaused: audit.StatePaused,
		phaseResetting: audit.StateRunning, phaseDestroying: audit.StateEnding, phaseDestroyFailed: audit.StateEnding, phasePooled: ""} {
		if got := p.state(); got != want {
			t.Errorf("phase %s shows %q, want %q", p, got, want)
		}
		if want != "" && !slices.Contains(audit.SandboxStates(), want) {
			t.Errorf("phase %s shows %q, not a documented state", p, want)
		}
	}
}
