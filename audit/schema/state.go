package schema

// SandboxState is a sandbox's place in its lifecycle, as the control API,
// the CLI, the SDKs and lifecycle events (lifecycle.state) show it.
type SandboxState string

// The states, in the order a sandbox goes through them. A sandbox is
// creating until its setup is done, running (paused and resumed any number
// of times) until something ends it, ending while its artifacts are
// exported and it is torn down (or while a failed teardown waits to be
// retried), and ended once it is gone.
const (
	StateCreating SandboxState = "creating"
	StateRunning  SandboxState = "running"
	StatePaused   SandboxState = "paused"
	StateEnding   SandboxState = "ending"
	StateEnded    SandboxState = "ended"
)

// SandboxStates lists every state, in lifecycle order.
func SandboxStates() []SandboxState {
	return []SandboxState{StateCreating, StateRunning, StatePaused, StateEnding, StateEnded}
}

// legacyStates maps the names an older appliance reported to the state
// they are now.
var legacyStates = map[string]SandboxState{"destroying": StateEnding, "destroy-failed": StateEnding}

// UnmarshalText reads a state, mapping an older appliance's names
// (destroying, destroy-failed) to ending. An unknown name is kept as it
// came, so a client still reads a sandbox from a newer appliance.
func (s *SandboxState) UnmarshalText(b []byte) error {
	if st, ok := legacyStates[string(b)]; ok {
		*s = st
		return nil
	}
	*s = SandboxState(b)
	return nil
}
