package schema

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
