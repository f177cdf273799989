package proxy

import (
	"net/http"
	"net/textproto"
	"strings"

	"airlock/policies"
)

// connectionGuarded returns the first field a request's Connection header
// names that a client may not have the proxy remove as hop-by-hop: the
// framing and routing fields, and the fields that carry the category's
// credentials. "" when there is none. Such a request is refused (400)
// rather than forwarded with the field silently dropped or re-added.
func connectionGuarded(h http.Header, cat *policies.Category) string {
	for _, f := range h["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if n := guardedField(strings.TrimSpace(name), cat); n != "" {
				return n
			}
		}
	}
	return ""
}

// guardedField returns the canonical name of a field a Connection header
// may not name, "" for any other (compared without allocating: the plain
// path's "keep-alive" costs nothing).
func guardedField(name string, cat *policies.Category) string {
	for _, g := range [...]string{"Content-Length", "Transfer-Encoding", "Host"} {
		if strings.EqualFold(name, g) {
			return g
		}
	}
	if cat == nil {
		return ""
	}
	if cat.Inject != nil && strings.EqualFold(name, cat.Inject.Header) {
		return textproto.CanonicalMIMEHeaderKey(name)
	}
	if len(cat.Sentinels) > 0 {
		for _, g := range cat.SentinelHeaders {
			if strings.EqualFold(name, g) {
				return g
			}
		}
	}
	return ""
}

// refuseConnection answers a Connection header naming a guarded field.
func (p *Proxy) refuseConnection(x *exch, req *http.Request, name string) *http.Response {
	d := internalDeny(ruleFraming, "the Connection header names "+name+", which the proxy does not remove as hop-by-hop")
	d.Category = x.v.Category
	return p.refuse(&x.ev, req, http.StatusBadRequest, d)
}
