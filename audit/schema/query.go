package schema

import "time"

// Query selects records from the store. Zero fields do not filter. It is
// plain data so the control API can take it from a request unchanged.
type Query struct {
	Sandbox  string    `json:"sandbox,omitempty"`
	Kind     Kind      `json:"kind,omitempty"`
	Verdict  string    `json:"verdict,omitempty"`   // allow | deny | ask | audit | would_deny
	Category string    `json:"category,omitempty"`  // category name
	Rule     string    `json:"rule,omitempty"`      // rule name, with or without its " (file:line:col)"
	Host     string    `json:"host,omitempty"`      // glob (* ? [...]), case-insensitive
	Since    time.Time `json:"since,omitzero"`      // time >= Since
	Until    time.Time `json:"until,omitzero"`      // time < Until
	AfterSeq uint64    `json:"after_seq,omitempty"` // seq > AfterSeq
	UpToSeq  uint64    `json:"up_to_seq,omitempty"` // seq <= UpToSeq
	Limit    int       `json:"limit,omitempty"`     // at most this many records; 0 = all
	Newest   bool      `json:"newest,omitempty"`    // with Limit: the newest records (still returned oldest first)
}
