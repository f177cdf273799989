package runner

import "airlock/audit"

// State is a sandbox's lifecycle state: creating, running, paused,
// ending, ended (audit.SandboxStates). The control API, the CLI and the
// lifecycle events show the same names.
type State = audit.SandboxState

// phase is where a sandbox is in the runner's own bookkeeping: finer than
// State, which it maps to (phase.state).
type phase string

const (
	phaseCreating phase = "creating"
	phaseRunning  phase = "running"
	phasePaused   phase = "paused"
	// phaseResetting: Reset replaces the container; commands are refused
	// meanwhile, and the sandbox shows running (a reset is an action on a
	// running sandbox, not a new one: same id, address and policy).
	phaseResetting phase = "resetting"
	// phaseDestroying: its end began; phaseDestroyFailed: its teardown
	// failed and a Destroy or Reconcile finishes it. Both show ending.
	phaseDestroying    phase = "destroying"
	phaseDestroyFailed phase = "destroy-failed"
	// phasePooled: a warm pool member, not a sandbox yet (no state shown):
	// created and started ahead of demand, its veth carrying the kernel
	// path with no identity bound (every packet dropped), no policy, no
	// commands. Members are not in List or Get; Create claims one.
	phasePooled phase = "pooled"
)

// state is the State a phase shows.
func (p phase) state() State {
	switch p {
	case phaseCreating:
		return audit.StateCreating
	case phaseRunning, phaseResetting:
		return audit.StateRunning
	case phasePaused:
		return audit.StatePaused
	case phaseDestroying, phaseDestroyFailed:
		return audit.StateEnding
	}
	return "" // pooled
}

// setPhase moves the sandbox to p; its State follows.
func (s *Sandbox) setPhase(p phase) {
	s.phase = p
	s.State = p.state()
}
