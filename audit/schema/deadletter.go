package schema

// AuditError is the payload of an audit_error event: a record a sink
// refused for good (or that could not be encoded), and where it went.
type AuditError struct {
	Sink       string `json:"sink"`                  // store | stream | pipeline (not encodable)
	Seq        uint64 `json:"seq,omitempty"`         // the refused record's seq; absent for one never sequenced
	RecordKind Kind   `json:"record_kind,omitempty"` // the refused record's kind
	// RecordSandbox is the refused record's sandbox, if it has one (the
	// audit_error record itself is appliance-wide).
	RecordSandbox string `json:"record_sandbox,omitempty"`
	Reason        string `json:"reason"`                // constraint | too_big | mismatch | encode
	Error         string `json:"error"`                 // the sink's or encoder's error
	DeadLetter    string `json:"dead_letter,omitempty"` // the file that holds the record; absent when it could not be written
	Attempts      int    `json:"attempts,omitempty"`    // writes of the record before it was given up on
}
