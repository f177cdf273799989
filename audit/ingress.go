package audit

import "strconv"

// Preview is the payload of a preview event: the event's id is the
// preview's, its reason says why (a refusal's rule, an end's cause).
type Preview struct {
	Stage     string `json:"stage"` // created | opened | refused | expired | revoked
	Port      int    `json:"port"`
	Name      string `json:"name,omitempty"`
	Principal string `json:"principal,omitempty"` // who opened or was refused
	By        string `json:"by,omitempty"`        // who exposed it
	Expires   string `json:"expires,omitempty"`   // RFC 3339
}

// Ingress is the payload of an ingress event: one request through the
// preview listener (the event's id is the preview's; verdict allow when it
// was proxied, deny when answered by the listener itself).
type Ingress struct {
	Principal  string `json:"principal,omitempty"`
	Client     string `json:"client"` // the client's address
	Method     string `json:"method"`
	Host       string `json:"host"`
	Path       string `json:"path"` // a query is replaced by ?[REDACTED]
	Proto      string `json:"proto,omitempty"`
	Port       int    `json:"port,omitempty"` // the sandbox port
	Status     int    `json:"status"`
	BytesUp    int64  `json:"bytes_up"`
	BytesDown  int64  `json:"bytes_down"`
	DurationMS int64  `json:"duration_ms"`
	Upgrade    string `json:"upgrade,omitempty"`
	// Count is how many requests this record stands for when the
	// listener aggregated a flood of refused ones (0: one).
	Count int64 `json:"count,omitempty"`
}

func appendIngressKinds(b []byte, e *Event) []byte {
	if p := e.Preview; p != nil {
		b = appendString(append(b, `,"preview":{"stage":`...), p.Stage)
		b = strconv.AppendInt(append(b, `,"port":`...), int64(p.Port), 10)
		b = optString(b, `,"name":`, p.Name)
		b = optString(b, `,"principal":`, p.Principal)
		b = optString(b, `,"by":`, p.By)
		b = append(optString(b, `,"expires":`, p.Expires), '}')
	}
	if in := e.Ingress; in != nil {
		b = optString(append(b, `,"ingress":{`...), `"principal":`, in.Principal)
		if in.Principal != "" {
			b = append(b, ',')
		}
		b = appendString(append(b, `"client":`...), in.Client)
		b = appendString(append(b, `,"method":`...), in.Method)
		b = appendString(append(b, `,"host":`...), in.Host)
		b = appendString(append(b, `,"path":`...), in.Path)
		b = optString(b, `,"proto":`, in.Proto)
		b = optInt(b, `,"port":`, int64(in.Port))
		b = strconv.AppendInt(append(b, `,"status":`...), int64(in.Status), 10)
		b = strconv.AppendInt(append(b, `,"bytes_up":`...), in.BytesUp, 10)
		b = strconv.AppendInt(append(b, `,"bytes_down":`...), in.BytesDown, 10)
		b = strconv.AppendInt(append(b, `,"duration_ms":`...), in.DurationMS, 10)
		b = optString(b, `,"upgrade":`, in.Upgrade)
		b = append(optInt(b, `,"count":`, in.Count), '}')
	}
	return b
}
