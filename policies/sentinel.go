package policies

import (
	"net/textproto"

	"airlock/internal/tomlpos"
)

// defaultSentinelHeaders is where a placeholder is swapped when the
// category does not say (sentinel_headers).
var defaultSentinelHeaders = []string{"Authorization"}

// sentinelHeaders reads sentinel_headers: the header fields a placeholder
// may be swapped in. Framing and routing fields are refused: a secret
// there would change how the request is framed or where it goes.
func (l *loader) sentinelHeaders(c *Category, w *strs, path string) {
	key := tomlpos.Join(path, "sentinel_headers")
	s, paths, ok := w.vals, w.paths, w.set
	if !ok {
		c.SentinelHeaders = defaultSentinelHeaders
		return
	}
	if len(c.Sentinels) == 0 {
		l.errf(key, "sentinel_headers without sentinels: no placeholder would be swapped")
	}
	out := make([]string, 0, len(s))
	for i, h := range s {
		name := textproto.CanonicalMIMEHeaderKey(h)
		switch {
		case !validToken(h):
			l.errf(paths[i], "%q is not an HTTP header name", h)
		case name == "Host" || name == "Content-Length" || name == "Transfer-Encoding" || name == "Connection":
			l.errf(paths[i], "%q frames or routes the request: a placeholder may not be swapped there", h)
		default:
			out = append(out, name)
		}
	}
	c.SentinelHeaders = out
}
