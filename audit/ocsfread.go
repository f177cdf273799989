package audit

import (
	"bytes"
	"encoding/json"
	"errors"
)

// errOCSFWithoutRecord: an OCSF line that does not carry the Airlock
// record it was made from cannot be read back or verified.
var errOCSFWithoutRecord = errors.New("an OCSF record without unmapped.airlock (the Airlock record it was made from, " +
	"which a shipper must keep) cannot be read back")

// chainedRecord returns the Airlock record of a stream line: the line
// itself in the airlock flavor, its unmapped.airlock, byte for byte, in
// the ocsf flavor. Other lines are returned unchanged for the caller to
// judge.
func chainedRecord(raw []byte) ([]byte, error) {
	if bytes.HasPrefix(raw, []byte(`{"schema":`)) {
		return raw, nil
	}
	var o struct {
		ClassUID *int64 `json:"class_uid"`
		Kind     *Kind  `json:"kind"`
		Unmapped struct {
			Airlock json.RawMessage `json:"airlock"`
		} `json:"unmapped"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return raw, nil
	}
	switch {
	case len(o.Unmapped.Airlock) > 0 && o.Unmapped.Airlock[0] == '{':
		return o.Unmapped.Airlock, nil
	case o.ClassUID != nil && o.Kind == nil:
		return nil, errOCSFWithoutRecord
	}
	return raw, nil
}

// ocsfDerived reports whether an OCSF line is exactly what the ocsf
// flavor writes for the record it carries: the chain vouches for that
// record, and this for the fields mapped from it. A line of another
// mapping version cannot be re-derived: known is false.
func ocsfDerived(line, rec []byte) (ok, known bool) {
	var o struct {
		Metadata struct {
			Product struct {
				Version string `json:"version"`
			} `json:"product"`
		} `json:"metadata"`
		Unmapped struct {
			Mapping int64 `json:"ocsf_mapping"`
		} `json:"unmapped"`
	}
	var e Event
	if json.Unmarshal(line, &o) != nil || json.Unmarshal(rec, &e) != nil {
		return false, true
	}
	if o.Unmapped.Mapping != ocsfMapping {
		return true, false
	}
	head := appendOCSFHead(nil, &e, o.Metadata.Product.Version)
	return bytes.Equal(ocsfLine(head, e.Seq, rec), line), true
}
