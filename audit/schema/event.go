// Package schema is Airlock's audit event schema (docs/events.md): the
// records and the store's query, as plain data. It imports nothing of the
// audit pipeline, so a client of the control API (bin/airlock) links it
// without the store, the metrics or the report; package audit names every
// identifier here too (aliases.go), and its code and its users use those.
package schema

import (
	"time"
)

// SchemaVersion is the version of the event schema (docs/events.md).
const SchemaVersion = 1

// Kind is an event kind.
type Kind string

const (
	KindDNS       Kind = "dns"       // one DNS query
	KindFlow      Kind = "flow"      // a connection: a decision record and a close record joined by ID
	KindHTTP      Kind = "http"      // one request inside an inspected tunnel or a plain-HTTP connection
	KindDrop      Kind = "drop"      // a packet the kernel path dropped
	KindExec      Kind = "exec"      // a command in a sandbox: requested, started, finished
	KindLifecycle Kind = "lifecycle" // sandbox created, started, destroyed, adopted, reconciled
	KindPolicy    Kind = "policy"    // a policy loaded, reloaded or rejected
	KindApproval  Kind = "approval"  // a held request and the human decision on it
	KindGap       Kind = "gap"       // events the pipeline had to drop, counted
	// KindSecretReflected: a response carried a secret the proxy injected
	// back toward the sandbox (replaced, or the response refused).
	KindSecretReflected Kind = "secret_reflected"
	// KindLockdown: the kill switch engaged, lifted or re-applied, for every
	// sandbox or one.
	KindLockdown Kind = "lockdown"
	// KindRefusal: the control API turned a request away (401, 403, 404
	// for another principal's sandbox, 429 over quota).
	KindRefusal Kind = "refusal"
	// KindPreview: a preview (ingress to a sandbox port) created, opened,
	// refused, expired or revoked; KindIngress: one request through it.
	KindPreview Kind = "preview"
	KindIngress Kind = "ingress"
	// KindAuditError: a sink (the store or the stream) refused a record
	// for good, or a record could not be encoded; the record went to the
	// dead-letter file instead (docs/events.md).
	KindAuditError Kind = "audit_error"
)

// Event is one audit record. Common fields are flat; the kind-specific
// payload is in exactly one of the pointer fields named after the kind.
type Event struct {
	Schema    int       `json:"schema"`
	Time      time.Time `json:"time"`
	Kind      Kind      `json:"kind"`
	Node      string    `json:"node,omitempty"` // the appliance (node) that wrote it: Config.Node
	Sandbox   string    `json:"sandbox,omitempty"`
	ID        string    `json:"id,omitempty"` // joins the records of one flow, request or exec
	Verdict   string    `json:"verdict,omitempty"`
	Rule      string    `json:"rule,omitempty"`
	Category  string    `json:"category,omitempty"`
	WouldDeny bool      `json:"would_deny"`
	Reason    string    `json:"reason,omitempty"`

	// The process in the sandbox that made a flow, request or query (its
	// socket's owner, asked of the sandbox's agent): see Attribution.
	ExecID      string `json:"exec_id,omitempty"`
	Pid         int    `json:"pid,omitempty"`
	Comm        string `json:"comm,omitempty"`
	Attribution string `json:"attribution,omitempty"`

	DNS       *DNS       `json:"dns,omitempty"`
	Flow      *Flow      `json:"flow,omitempty"`
	HTTP      *HTTP      `json:"http,omitempty"`
	Drop      *Drop      `json:"drop,omitempty"`
	Exec      *Exec      `json:"exec,omitempty"`
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`
	Policy    *Policy    `json:"policy,omitempty"`
	Approval  *Approval  `json:"approval,omitempty"`
	Gap       *Gap       `json:"gap,omitempty"`

	SecretReflected *SecretReflected `json:"secret_reflected,omitempty"`
	Lockdown        *Lockdown        `json:"lockdown,omitempty"`
	Refusal         *Refusal         `json:"refusal,omitempty"`
	Preview         *Preview         `json:"preview,omitempty"`
	Ingress         *Ingress         `json:"ingress,omitempty"`
	AuditError      *AuditError      `json:"audit_error,omitempty"`

	// Seq and PrevHash are set by the stream: the record's position and the
	// hash of the previous record (tamper evidence).
	Seq      uint64 `json:"seq,omitempty"`
	PrevHash string `json:"prev_hash,omitempty"`
}

// DNS is the payload of a dns event.
type DNS struct {
	QName string `json:"qname"`
	// QNameTruncated: QName is cut short (a name an exfiltration guard
	// refused); QNameSHA256 is then the hash of the whole name.
	QNameTruncated bool     `json:"qname_truncated,omitempty"`
	QNameSHA256    string   `json:"qname_sha256,omitempty"`
	QType          string   `json:"qtype"`
	RCode          string   `json:"rcode"`
	Answers        []string `json:"answers,omitempty"`
	Chain          []DNSHop `json:"chain,omitempty"`    // the answer's CNAME targets, in order
	Stripped       []string `json:"stripped,omitempty"` // addresses removed by the rebinding guard
	Upstream       string   `json:"upstream,omitempty"`
	LatencyUS      int64    `json:"latency_us"`
	CacheHit       bool     `json:"cache_hit"`
	Guard          string   `json:"guard,omitempty"` // the exfiltration guard that tripped
	Client         string   `json:"client,omitempty"`
	Server         string   `json:"server,omitempty"` // the address the query was sent to
}

// DNSHop is one CNAME target of an answer and what the sandbox's policy
// decides for that name.
type DNSHop struct {
	Name      string `json:"name"`
	Verdict   string `json:"verdict"`
	Rule      string `json:"rule"`
	WouldDeny bool   `json:"would_deny,omitempty"`
}

// Flow is the payload of a flow event. Stage "decision" is written when the
// policy decides, "close" when the connection ends.
type Flow struct {
	Stage       string `json:"stage"` // decision | close
	Source      string `json:"source"`
	OrigDst     string `json:"orig_dst,omitempty"`
	Dialed      string `json:"dialed,omitempty"`
	SNI         string `json:"sni,omitempty"`
	Host        string `json:"host,omitempty"`
	ALPN        string `json:"alpn,omitempty"`
	Mode        string `json:"mode,omitempty"`     // explicit | transparent
	Handling    string `json:"handling,omitempty"` // inspect | splice | none
	Mismatch    bool   `json:"mismatch,omitempty"` // original address not among the name's addresses
	BytesUp     int64  `json:"bytes_up,omitempty"`
	BytesDown   int64  `json:"bytes_down,omitempty"`
	DurationMS  int64  `json:"duration_ms,omitempty"`
	CloseReason string `json:"close_reason,omitempty"`
}

// HTTP is the payload of an http event.
type HTTP struct {
	Method     string   `json:"method"`
	Scheme     string   `json:"scheme"`
	Host       string   `json:"host"`
	Path       string   `json:"path"`
	Query      string   `json:"query,omitempty"` // only when the category logs it
	Status     int      `json:"status,omitempty"`
	BytesUp    int64    `json:"bytes_up,omitempty"`
	BytesDown  int64    `json:"bytes_down,omitempty"`
	DurationMS int64    `json:"duration_ms,omitempty"`
	FlowID     string   `json:"flow_id,omitempty"`
	Injected   []string `json:"injected,omitempty"` // secret names, never values
	Secret     string   `json:"secret,omitempty"`   // a sentinel seen going to the wrong host
	Package    *Package `json:"package,omitempty"`
	Upgrade    string   `json:"upgrade,omitempty"` // e.g. websocket
}

// Package is a package download the proxy recognized.
type Package struct {
	Ecosystem string `json:"ecosystem"`
	Name      string `json:"name"`
	Version   string `json:"version,omitempty"`
	// Published is the version's publish time (RFC 3339) when the
	// package gate looked it up.
	Published string `json:"published,omitempty"`
	// Integrity is the digest the registry's metadata gives for the
	// artifact ("sha512-…"), which the download was checked against.
	Integrity string `json:"integrity,omitempty"`
	// Gated are the versions the package gate hid from the metadata (or,
	// in audit mode, would have hidden), at most MaxGated of them;
	// GatedTotal counts them all.
	Gated      []GatedVersion `json:"gated,omitempty"`
	GatedTotal int            `json:"gated_total,omitempty"`
	// Warning is a gate that failed open (no publish time known).
	Warning string `json:"warning,omitempty"`
	// Cache is "hit" when the package cache answered the request, "miss"
	// when it could not (and will keep the verified artifact); empty when
	// the cache is off or does not apply.
	Cache string `json:"cache,omitempty"`
}

// MaxGated bounds Package.Gated.
const MaxGated = 50

// GatedVersion is one version the package gate hid, and why.
type GatedVersion struct {
	Version   string `json:"version"`
	Reason    string `json:"reason"` // starts with its code: package_too_new, osv:MAL-…, install_script
	Rule      string `json:"rule"`
	Published string `json:"published,omitempty"`
}

// Drop is the payload of a drop event (from the kernel path).
type Drop struct {
	Protocol string `json:"protocol"`
	Source   string `json:"source"`
	Dest     string `json:"dest"`
	Port     uint16 `json:"port,omitempty"`
	MAC      string `json:"mac,omitempty"` // the refused source MAC of a spoofed-mac drop
	Count    uint64 `json:"count"`         // packets this record stands for (aggregated)
}

// Exec is the payload of an exec event.
type Exec struct {
	Stage      string   `json:"stage"` // requested | started | finished
	Argv       []string `json:"argv"`
	Cwd        string   `json:"cwd,omitempty"`
	ExitCode   *int     `json:"exit_code,omitempty"`
	DurationMS int64    `json:"duration_ms,omitempty"`
	TimedOut   bool     `json:"timed_out,omitempty"`
	Killed     bool     `json:"killed,omitempty"`
	// Limit names the limit that ended it (ExecLimit*); empty when none
	// did.
	Limit string `json:"limit,omitempty"`
	// Through the in-sandbox agent (Agent "airlock-init"; "podman-exec" is
	// the engine fallback, which knows only the fields above).
	Agent      string `json:"agent,omitempty"`
	User       string `json:"user,omitempty"`
	Pid        int    `json:"pid,omitempty"` // in the sandbox's pid namespace (started)
	Background bool   `json:"background,omitempty"`
	TTY        bool   `json:"tty,omitempty"`
	Signal     string `json:"signal,omitempty"` // the signal that ended it (finished; exit_code -1)
	Reaped     int    `json:"reaped,omitempty"` // descendants killed at its end
	UtimeUS    int64  `json:"utime_us,omitempty"`
	StimeUS    int64  `json:"stime_us,omitempty"`
	MaxRSSKB   int64  `json:"maxrss_kb,omitempty"`
	// Output: byte counts, and the first and last bytes of each stream
	// (bounded, known secret values replaced by [REDACTED], counted).
	StdoutBytes int64  `json:"stdout_bytes,omitempty"`
	StderrBytes int64  `json:"stderr_bytes,omitempty"`
	StdoutHead  string `json:"stdout_head,omitempty"`
	StdoutTail  string `json:"stdout_tail,omitempty"`
	StderrHead  string `json:"stderr_head,omitempty"`
	StderrTail  string `json:"stderr_tail,omitempty"`
	Redactions  int    `json:"redactions,omitempty"`
	Recovered   bool   `json:"recovered,omitempty"` // finished record written after an appliance restart
	// Record is the artifact name of a recorded shell session's record
	// (shells/ID.jsonl: what was typed and shown, timed, secrets redacted).
	Record string `json:"record,omitempty"`
	// Principal is the control API principal that ran the command ("":
	// the appliance itself, e.g. a setup command of a create it names).
	Principal string `json:"principal,omitempty"`
}

// Lifecycle is the payload of a lifecycle event.
type Lifecycle struct {
	Stage string `json:"stage"` // created | started | ready | ending | destroyed | ... (docs/events.md)
	// State is the sandbox's state once this record is written (empty on
	// a warm pool member's records: it is not a sandbox yet).
	State SandboxState `json:"state,omitempty"`
	// Principal is the control API principal whose request this record is
	// ("": the appliance on its own: a lifetime, a restart).
	Principal  string `json:"principal,omitempty"`
	Image      string `json:"image,omitempty"`
	Policy     string `json:"policy,omitempty"`
	PolicyHash string `json:"policy_hash,omitempty"`
	Address    string `json:"address,omitempty"`
	// ImageID is the digest of the image the sandbox runs from; Template
	// the template version (NAME:vN) it came from, if any.
	ImageID  string `json:"image_id,omitempty"`
	Template string `json:"template,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Detail   string `json:"detail,omitempty"`
	// At a sandbox's end: its record range and the chain hash at that point.
	FirstSeq  uint64 `json:"first_seq,omitempty"`
	LastSeq   uint64 `json:"last_seq,omitempty"`
	FinalHash string `json:"final_hash,omitempty"`
	// Changes are the files the sandbox changed in its workspace, when the
	// runner computed them (usually on the destroyed record).
	Changes []FileChange `json:"changes,omitempty"`
}

// FileChange is one file a sandbox added, modified or deleted.
type FileChange struct {
	Path string `json:"path"`
	Op   string `json:"op"` // added | modified | deleted | written (files API)
	Size int64  `json:"size,omitempty"`
}

// Policy is the payload of a policy event.
type Policy struct {
	Action  string   `json:"action"` // loaded | reloaded | rejected
	Name    string   `json:"name"`
	OldHash string   `json:"old_hash,omitempty"`
	NewHash string   `json:"new_hash,omitempty"`
	Errors  []string `json:"errors,omitempty"`
}

// Approval is the payload of an approval event.
type Approval struct {
	Stage       string `json:"stage"` // held | approved | denied | expired
	Destination string `json:"destination"`
	Command     string `json:"command,omitempty"` // the command running at the time
	DecidedBy   string `json:"decided_by,omitempty"`
	For         string `json:"for,omitempty"` // "once" or a duration
}

// Gap is the payload of a gap event: events the pipeline lost.
type Gap struct {
	Dropped uint64    `json:"dropped"`
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
}

// SecretReflected is the payload of a secret_reflected event: where a
// response to a request the proxy injected into carried the secret back.
type SecretReflected struct {
	Secret   string `json:"secret"`   // the secret's name, never its value
	Host     string `json:"host"`     // the host that sent it back
	Position string `json:"position"` // header:NAME, trailer:NAME, body, upgrade, header name
	Offset   int64  `json:"offset"`   // body: offset of the first occurrence in the decoded body
	Count    int    `json:"count"`    // occurrences replaced there (0 when refused)
	Action   string `json:"action"`   // replaced | refused
}

// Refusal is the payload of a refusal event; the event's reason says why.
// It never carries a token.
type Refusal struct {
	Principal string `json:"principal"` // "" when no token matched (401)
	Action    string `json:"action"`    // METHOD PATH of the request
	Status    int    `json:"status"`    // the HTTP status answered
	Code      string `json:"code"`      // the API error code
	Peer      string `json:"peer,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	Target    string `json:"target,omitempty"` // the sandbox or approval asked for
}

// Lockdown is the payload of a lockdown event; the event's reason is the
// operator's --reason, its sandbox the one sandbox blocked (absent: all).
type Lockdown struct {
	Action string `json:"action"` // engaged | lifted | restored (re-applied at start)
	Scope  string `json:"scope"`  // all | sandbox
	By     string `json:"by"`     // the control API caller: "NAME (uid N)" or "token@ADDR"
}

// The limits that can end a command (Exec.Limit; the API's ExecResult.Limit
// re-exports them).
const (
	ExecLimitTimeout = "timeout" // its exec timeout: the runner killed its tree
	ExecLimitFsize   = "fsize"   // the file size rlimit (SIGXFSZ)
	ExecLimitCPU     = "cpu"     // the CPU time rlimit (SIGXCPU)
)
