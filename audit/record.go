package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// record is an event on its way through the pipeline. It is encoded once,
// on the producer's goroutine, so Emit never retains the caller's Event
// (whose payload pointers the producer may reuse).
type record struct {
	body      []byte // JSON object of the event without seq and prev_hash
	time      int64  // unix nanoseconds
	kind      Kind
	sandbox   string
	id        string
	verdict   string
	category  string
	rule      string
	host      string
	wouldDeny bool
	// end is set for a lifecycle record that ends a sandbox: the writer
	// fills in the sandbox's record range before encoding it.
	end *Event
	// ocsf is the record's OCSF head (appendOCSFHead) when the stream is
	// of that flavor: the stream line wraps the chained record in it.
	ocsf []byte
}

// line is a record with its place in the chain: the exact bytes stored in
// the store and, in the airlock flavor, written to the stream (without the
// newline); in the ocsf flavor the stream gets stream, which holds raw.
type line struct {
	rec    *record
	seq    uint64
	raw    []byte
	hash   [32]byte
	stream []byte
}

// out is the line as the stream writes it.
func (l *line) out() []byte {
	if l.stream != nil {
		return l.stream
	}
	return l.raw
}

// encoder is how a pipeline encodes: the node name it stamps on every
// record, and the OCSF head when the stream is of that flavor.
type encoder struct {
	node    string
	ocsf    bool
	version string // the product version OCSF metadata names
}

// encode stamps the node name and encodes e, with its OCSF head when the
// stream wants it.
func (c *encoder) encode(e Event) (*record, error) {
	if c.node != "" {
		e.Node = c.node
	}
	// Normalized here, once, so the OCSF head has the very time (now, for
	// an event without one) of the record it carries.
	normalize(&e)
	r, err := encode(e)
	if err != nil || !c.ocsf {
		return r, err
	}
	src := &e
	if r.end != nil {
		src = r.end
	}
	r.ocsf = appendOCSFHead(make([]byte, 0, 640), src, c.version)
	return r, nil
}

// normalize fills the fields a producer may leave out.
func normalize(e *Event) {
	if e.Schema == 0 {
		e.Schema = SchemaVersion
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	e.Seq, e.PrevHash = 0, ""
}

// encode turns an event into a record. It copies everything it keeps.
func encode(e Event) (*record, error) {
	normalize(&e)
	r := &record{
		time: e.Time.UnixNano(), kind: e.Kind, sandbox: e.Sandbox, id: e.ID,
		verdict: e.Verdict, category: e.Category, rule: e.Rule,
		host: strings.ToLower(Host(&e)), wouldDeny: e.WouldDeny,
	}
	if endsSandbox(&e) {
		c := e
		lc := *e.Lifecycle
		if lc.ExitCode != nil {
			code := *lc.ExitCode
			lc.ExitCode = &code
		}
		lc.Changes = append([]FileChange(nil), lc.Changes...)
		c.Lifecycle = &lc
		r.end = &c
		return r, nil
	}
	b, err := marshalBody(&e)
	if err != nil {
		return nil, fmt.Errorf("audit: encode %s event: %w", e.Kind, err)
	}
	r.body = b
	return r, nil
}

// chainRoom is the room chainLine needs after a body for seq and prev_hash.
const chainRoom = len(`,"seq":18446744073709551615,"prev_hash":""}`) + 64

// marshalBody encodes e as encoding/json does (appendEvent), into a
// buffer with room for chainLine to append seq and prev_hash in place: the
// event is encoded once and its bytes are the stream line and the store's
// raw column.
func marshalBody(e *Event) ([]byte, error) {
	b, err := appendEvent(make([]byte, 0, 512+chainRoom), e)
	if err != nil {
		return nil, err
	}
	if cap(b)-len(b) < chainRoom {
		b = append(make([]byte, 0, len(b)+chainRoom), b...)
	}
	return b, nil
}

// endsSandbox reports whether e is the lifecycle record written at a
// sandbox's end, which carries its record range and final hash.
func endsSandbox(e *Event) bool {
	return e.Kind == KindLifecycle && e.Lifecycle != nil && e.Sandbox != "" &&
		(e.Lifecycle.Stage == "destroyed" || e.Lifecycle.Stage == "failed")
}

// Host is the destination an event is about, as stored in the host column
// and matched by Query.Host: the DNS name, the flow's host (else SNI, else
// original destination), the HTTP host, the dropped packet's destination or
// the held destination, the host that reflected a secret. Empty for other
// kinds.
func Host(e *Event) string {
	switch {
	case e.DNS != nil:
		return strings.TrimSuffix(e.DNS.QName, ".")
	case e.Flow != nil:
		return firstNonEmpty(e.Flow.Host, e.Flow.SNI, hostOnly(e.Flow.OrigDst))
	case e.HTTP != nil:
		return hostOnly(e.HTTP.Host)
	case e.Drop != nil:
		return e.Drop.Dest
	case e.Approval != nil:
		return hostOnly(e.Approval.Destination)
	case e.SecretReflected != nil:
		return e.SecretReflected.Host
	}
	return ""
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// hostOnly strips a port from host:port or [v6]:port; other strings are
// returned unchanged.
func hostOnly(s string) string {
	if strings.HasPrefix(s, "[") {
		if i := strings.Index(s, "]"); i > 0 {
			return s[1:i]
		}
		return s
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.Count(s, ":") == 1 {
		if _, err := strconv.Atoi(s[i+1:]); err == nil {
			return s[:i]
		}
	}
	return s
}

// chainLine appends seq and prev_hash to an encoded event body, in place
// when the body has room (it is not used again).
func chainLine(body []byte, seq uint64, prev [32]byte, genesis bool) []byte {
	out := body[:len(body)-1]
	out = append(out, `,"seq":`...)
	out = strconv.AppendUint(out, seq, 10)
	out = append(out, `,"prev_hash":"`...)
	if !genesis {
		out = hex.AppendEncode(out, prev[:])
	}
	return append(out, `"}`...)
}

// HashLine is the chain hash of one JSONL record: SHA-256 over the exact
// bytes of the line without its trailing newline, in lowercase hex. The
// next record's prev_hash must equal it.
func HashLine(raw []byte) string {
	h := sha256.Sum256(raw)
	return hex.EncodeToString(h[:])
}
