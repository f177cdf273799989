package audit

import (
	"fmt"
	"strings"
)

// Format is the flavor of the JSONL stream (Config.StreamFormat).
type Format string

const (
	// FormatAirlock: each line is the Airlock record (docs/events.md).
	FormatAirlock Format = "airlock"
	// FormatOCSF: each line is an OCSF event (docs/events.md, "OCSF")
	// carrying the exact Airlock record in unmapped.airlock.
	FormatOCSF Format = "ocsf"
)

// ParseFormat checks a stream flavor by name; "" is FormatAirlock.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case "", FormatAirlock:
		return FormatAirlock, nil
	case FormatOCSF:
		return FormatOCSF, nil
	}
	return "", fmt.Errorf("unknown stream format %q (want %q or %q)", s, FormatAirlock, FormatOCSF)
}

// OCSFVersion is the OCSF schema version the ocsf flavor follows.
const OCSFVersion = "1.3.0"

// OCSF class uids the mapping uses.
const (
	ocsfBase     = 0    // Base Event: every kind without a closer class
	ocsfProcess  = 1007 // Process Activity: exec
	ocsfNetwork  = 4001 // Network Activity: flow, drop
	ocsfHTTP     = 4002 // HTTP Activity: http
	ocsfDNS      = 4003 // DNS Activity: dns
	ocsfAPI      = 6003 // API Activity: refusal
	ocsfActOther = 99
)

// ocsfClass is one OCSF class: its name, its category, and the names of
// the activities the mapping uses.
type ocsfClass struct {
	name       string
	category   int
	catName    string
	activities map[int]string
}

// ocsfClasses are the classes the ocsf flavor writes, by class_uid
// (TestOCSFUidsConsistent holds every record to it).
var ocsfClasses = map[int]ocsfClass{
	ocsfBase:    {"Base Event", 0, "Uncategorized", map[int]string{0: "Unknown", 99: "Other"}},
	ocsfProcess: {"Process Activity", 1, "System Activity", map[int]string{1: "Launch", 2: "Terminate", 99: "Other"}},
	ocsfNetwork: {"Network Activity", 4, "Network Activity", map[int]string{1: "Open", 2: "Close", 3: "Reset", 5: "Refuse", 99: "Other"}},
	ocsfHTTP: {"HTTP Activity", 4, "Network Activity", map[int]string{1: "Connect", 2: "Delete", 3: "Get", 4: "Head",
		5: "Options", 6: "Post", 7: "Put", 8: "Trace", 99: "Other"}},
	ocsfDNS: {"DNS Activity", 4, "Network Activity", map[int]string{1: "Query", 99: "Other"}},
	ocsfAPI: {"API Activity", 6, "Application Activity", map[int]string{1: "Create", 2: "Read", 3: "Update", 4: "Delete", 99: "Other"}},
}

// ocsfHead is the classification of one event.
type ocsfHead struct {
	class    int
	activity int
	severity int
}

// classify picks an event's class and activity. A kind without a closer
// class, and any kind added later, is a Base Event with activity Other.
func classify(e *Event) ocsfHead {
	h := ocsfHead{class: ocsfBase, activity: ocsfActOther, severity: ocsfSeverity(e)}
	switch {
	case e.Kind == KindFlow && e.Flow != nil:
		h.class, h.activity = ocsfNetwork, flowActivity(e)
	case e.Kind == KindDrop && e.Drop != nil:
		h.class, h.activity = ocsfNetwork, 5
	case e.Kind == KindHTTP && e.HTTP != nil:
		h.class, h.activity = ocsfHTTP, httpActivity(e.HTTP.Method)
	case e.Kind == KindDNS && e.DNS != nil:
		h.class, h.activity = ocsfDNS, 1
	case e.Kind == KindExec && e.Exec != nil:
		h.class, h.activity = ocsfProcess, execActivity(e.Exec.Stage)
	case e.Kind == KindRefusal && e.Refusal != nil:
		h.class, h.activity = ocsfAPI, apiActivity(e.Refusal.Action)
	}
	return h
}

func flowActivity(e *Event) int {
	switch {
	case e.Flow.Stage == "close" && e.Flow.CloseReason == "reset":
		return 3
	case e.Flow.Stage == "close":
		return 2
	case e.Verdict == "deny":
		return 5
	case e.Flow.Stage == "decision":
		return 1
	}
	return ocsfActOther
}

var httpActivities = map[string]int{"CONNECT": 1, "DELETE": 2, "GET": 3, "HEAD": 4, "OPTIONS": 5, "POST": 6, "PUT": 7, "TRACE": 8}

func httpActivity(method string) int {
	if a, ok := httpActivities[strings.ToUpper(method)]; ok {
		return a
	}
	return ocsfActOther
}

func execActivity(stage string) int {
	switch stage {
	case "started":
		return 1
	case "finished":
		return 2
	}
	return ocsfActOther
}

// apiActivity maps the refused request's method ("METHOD PATH").
func apiActivity(action string) int {
	method, _, _ := strings.Cut(action, " ")
	switch method {
	case "POST":
		return 1
	case "GET", "HEAD":
		return 2
	case "PUT", "PATCH":
		return 3
	case "DELETE":
		return 4
	}
	return ocsfActOther
}

var ocsfSeverityNames = map[int]string{1: "Informational", 2: "Low", 3: "Medium", 4: "High", 5: "Critical"}

// ocsfSeverity: a lost or refused record or a reflected secret is High, a denial
// Medium, an audit-mode would-deny Low, anything else Informational.
func ocsfSeverity(e *Event) int {
	switch {
	case e.Kind == KindGap, e.Kind == KindAuditError, e.Kind == KindSecretReflected:
		return 4
	case e.Verdict == "deny", e.Kind == KindDrop, e.Kind == KindRefusal:
		return 3
	case e.WouldDeny:
		return 2
	}
	return 1
}

// ocsfOutcome is the action, disposition and status of a verdict.
type ocsfOutcome struct {
	action, disposition, status int
	actionName, dispName        string
}

// outcome maps the verdict (and a kernel drop, which has none).
func outcome(e *Event) (ocsfOutcome, bool) {
	switch {
	case e.Kind == KindDrop:
		return ocsfOutcome{2, 6, 2, "Denied", "Dropped"}, true
	case e.Kind == KindRefusal:
		return ocsfOutcome{2, 2, 2, "Denied", "Blocked"}, true
	}
	switch e.Verdict {
	case "allow":
		return ocsfOutcome{1, 1, 1, "Allowed", "Allowed"}, true
	case "deny":
		return ocsfOutcome{2, 2, 2, "Denied", "Blocked"}, true
	case "audit":
		return ocsfOutcome{1, 17, 1, "Allowed", "Logged"}, true
	case "ask":
		return ocsfOutcome{99, 14, 0, "Other", "Delayed"}, true
	}
	return ocsfOutcome{}, false
}

var statusNames = map[int]string{0: "Unknown", 1: "Success", 2: "Failure"}

// UnmarshalText reads a stream flavor from a config file.
func (f *Format) UnmarshalText(b []byte) error {
	v, err := ParseFormat(string(b))
	if err != nil {
		return err
	}
	*f = v
	return nil
}
