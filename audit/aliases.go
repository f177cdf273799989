package audit

import (
	"time"

	es "airlock/audit/schema" // the event schema (store.go has a schema too: its SQL)
)

// The event schema is package schema (plain data, light to link); audit
// names all of it, so producers and readers write audit.Event as before.
// TestAliasesCoverSchema fails when schema gains a name not listed here.

const (
	SchemaVersion = es.SchemaVersion
	MaxGated      = es.MaxGated

	ExecLimitTimeout = es.ExecLimitTimeout
	ExecLimitFsize   = es.ExecLimitFsize
	ExecLimitCPU     = es.ExecLimitCPU
)

type (
	Kind            = es.Kind
	Event           = es.Event
	DNS             = es.DNS
	DNSHop          = es.DNSHop
	Flow            = es.Flow
	HTTP            = es.HTTP
	Package         = es.Package
	GatedVersion    = es.GatedVersion
	Drop            = es.Drop
	Exec            = es.Exec
	Lifecycle       = es.Lifecycle
	FileChange      = es.FileChange
	Policy          = es.Policy
	Approval        = es.Approval
	Gap             = es.Gap
	SecretReflected = es.SecretReflected
	Refusal         = es.Refusal
	Lockdown        = es.Lockdown
	Preview         = es.Preview
	Ingress         = es.Ingress
	Query           = es.Query
	SandboxState    = es.SandboxState
	AuditError      = es.AuditError
)

const (
	StateCreating = es.StateCreating
	StateRunning  = es.StateRunning
	StatePaused   = es.StatePaused
	StateEnding   = es.StateEnding
	StateEnded    = es.StateEnded
)

// SandboxStates lists every state, in lifecycle order.
func SandboxStates() []SandboxState { return es.SandboxStates() }

const (
	KindDNS             = es.KindDNS
	KindFlow            = es.KindFlow
	KindHTTP            = es.KindHTTP
	KindDrop            = es.KindDrop
	KindExec            = es.KindExec
	KindLifecycle       = es.KindLifecycle
	KindPolicy          = es.KindPolicy
	KindApproval        = es.KindApproval
	KindGap             = es.KindGap
	KindSecretReflected = es.KindSecretReflected
	KindLockdown        = es.KindLockdown
	KindRefusal         = es.KindRefusal
	KindPreview         = es.KindPreview
	KindIngress         = es.KindIngress
	KindAuditError      = es.KindAuditError
)

// Emitter is what producers write events to. Emit must not block for long
// and must not retain e after it returns.
type Emitter interface {
	Emit(e Event)
}

// EmitterFunc adapts a function to Emitter.
type EmitterFunc func(Event)

// Emit calls f(e).
func (f EmitterFunc) Emit(e Event) { f(e) }

// Discard is an Emitter that drops everything (for benchmarks only).
var Discard Emitter = EmitterFunc(func(Event) {})

// New returns an event of kind k with the schema version and time set.
func New(k Kind, sandbox string) Event {
	return Event{Schema: SchemaVersion, Time: time.Now().UTC(), Kind: k, Sandbox: sandbox}
}
