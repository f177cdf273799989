package proxy

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"airlock/policies"
)

// applySecrets swaps sentinel placeholders for real secrets toward the
// secret's own hosts, in the positions its category names, blocks
// placeholders anywhere else, and sets the category's injected credential
// after every client value is gone. Every value put in is recorded, so
// that the response is scanned for it (reflect.go).
func (p *Proxy) applySecrets(ev *reqEvent, req, out *http.Request, sandboxID, host string, v policies.Verdict) *http.Response {
	sec := p.cfg.Secrets
	if sec != nil {
		phs := sec.Placeholders(sandboxID)
		body, err := scanBody(out, len(phs) > 0)
		if err != nil {
			return p.bodyError(ev, req, err)
		}
		var watch []secretPattern
		reasons := map[string]string{}
		for _, ph := range phs {
			if ph.Value == "" {
				continue
			}
			if resp := p.swapPlaceholder(ev, req, out, sandboxID, ph, body, v); resp != nil {
				return resp
			}
			if reason := bodyRefusal(v.Cat, ph); body == nil && reason != "" {
				watch = append(watch, secretPattern{name: ph.Name, find: []byte(ph.Value)})
				reasons[ph.Name] = reason
			}
		}
		p.watchBody(ev, out, watch, reasons)
	}
	if resp := p.inject(ev, req, out, sandboxID, v); resp != nil {
		return resp
	}
	if ev.inj != nil {
		narrowForScan(out.Header)
	}
	return nil
}

// refuseInjectedUpgrade refuses, before it leaves, a request the proxy
// put a secret into that asks to switch protocols (WebSocket, h2c, any
// Upgrade): what would come back over the switched connection could not
// be scanned for the secret.
func (p *Proxy) refuseInjectedUpgrade(x *exch, req *http.Request) *http.Response {
	up := x.ev.e.HTTP.Upgrade
	if x.ev.inj == nil || up == "" {
		return nil
	}
	d := internalDeny(ruleInject, "a request carrying an injected secret may not switch protocols (Upgrade: "+up+"): what comes back could not be scanned for the secret")
	d.Category = x.v.Category
	return p.refuse(&x.ev, req, http.StatusForbidden, d)
}

// inject sets the category's credential.
func (p *Proxy) inject(ev *reqEvent, req, out *http.Request, sandboxID string, v policies.Verdict) *http.Response {
	if v.Cat == nil || v.Cat.Inject == nil {
		return nil
	}
	in := v.Cat.Inject
	val, resp := p.secretValue(ev, req, sandboxID, in.Secret, "the credential for this category", v)
	if resp != nil {
		return resp
	}
	out.Header.Del(in.Header)
	out.Header.Set(in.Header, in.Value(val))
	ev.e.HTTP.Injected = append(ev.e.HTTP.Injected, in.Secret)
	ev.addInjection(in.Secret, val, p.replacementFor(sandboxID, in.Secret))
	return nil
}

// secretValue looks up the secret name for the sandbox; when the store
// has none, the request is refused (502): what names it for the reason.
func (p *Proxy) secretValue(ev *reqEvent, req *http.Request, sandboxID, name, what string, v policies.Verdict) (string, *http.Response) {
	if p.cfg.Secrets != nil {
		if val, ok := p.cfg.Secrets.Lookup(sandboxID, name); ok {
			return val, nil
		}
	}
	d := internalDeny(ruleInject, what+" is not available")
	d.Category = v.Category
	return "", p.refuse(ev, req, http.StatusBadGateway, d)
}

// swapPlaceholder swaps one placeholder in the positions its category
// allows; body is the request body when scanBody could search it.
func (p *Proxy) swapPlaceholder(ev *reqEvent, req, out *http.Request, sandboxID string, ph Placeholder, body []byte, v policies.Verdict) *http.Response {
	may := v.Cat != nil && slices.Contains(v.Cat.Sentinels, ph.Name)
	var allowed []string
	if may {
		allowed = v.Cat.SentinelHeaders
	}
	outside, inAllowed := placeholderPositions(out, ph.Value, allowed)
	bodyOK := may && v.Cat.SentinelBody
	if outside == "" && !bodyOK && len(body) > 0 && bytes.Contains(body, []byte(ph.Value)) {
		outside = "the body"
	}
	switch {
	case !may && (outside != "" || inAllowed):
		return p.secretEgress(ev, req, ph.Name, reasonForeignHost)
	case outside != "":
		return p.secretEgress(ev, req, ph.Name, misplaced(outside, v.Cat))
	case !inAllowed && !bodyOK:
		return nil
	}
	real, resp := p.secretValue(ev, req, sandboxID, ph.Name, "the secret for a placeholder", v)
	if resp != nil {
		return resp
	}
	swapped := inAllowed
	for _, k := range allowed {
		for i, s := range out.Header[k] {
			out.Header[k][i] = strings.ReplaceAll(s, ph.Value, real)
		}
	}
	if bodyOK && out.Body != nil && out.Body != http.NoBody {
		inBody, resp := p.swapBody(ev, req, out, ph.Value, real)
		if resp != nil {
			return resp
		}
		swapped = swapped || inBody
	}
	if swapped {
		ev.e.HTTP.Injected = append(ev.e.HTTP.Injected, ph.Name)
		ev.addInjection(ph.Name, real, ph.Value)
	}
	return nil
}

// placeholderPositions finds a placeholder in the request's head: the
// first position outside the allowed header fields ("" when none), and
// whether it is in an allowed one.
func placeholderPositions(out *http.Request, ph string, allowed []string) (string, bool) {
	if strings.Contains(out.URL.RawQuery, ph) {
		return "the URL query", false
	}
	if strings.Contains(out.URL.EscapedPath(), ph) || strings.Contains(out.URL.Path, ph) {
		return "the URL path", false
	}
	in := false
	for k, vals := range out.Header {
		if strings.Contains(k, ph) {
			return "a header name", false
		}
		for _, s := range vals {
			if !strings.Contains(s, ph) {
				continue
			}
			if !slices.Contains(allowed, k) {
				return "header " + k, false
			}
			in = true
		}
	}
	return "", in
}

// reasonForeignHost refuses a placeholder sent to a host not its own.
const reasonForeignHost = "a secret placeholder may only be sent to its own hosts"

// misplaced refuses a placeholder in a position its category does not
// swap it in.
func misplaced(pos string, c *policies.Category) string {
	return "a secret placeholder in " + pos + ": it is swapped only in " + sentinelPlaces(c)
}

// bodyRefusal says why ph may not be in a request body to c's hosts, or
// "" when c swaps it there.
func bodyRefusal(c *policies.Category, ph Placeholder) string {
	switch {
	case c == nil || !slices.Contains(c.Sentinels, ph.Name):
		return reasonForeignHost
	case !c.SentinelBody:
		return misplaced("the body", c)
	}
	return ""
}

// sentinelPlaces says where a category swaps placeholders.
func sentinelPlaces(c *policies.Category) string {
	s := "header " + strings.Join(c.SentinelHeaders, ", ")
	if len(c.SentinelHeaders) == 0 {
		s = "no header"
	}
	if c.SentinelBody {
		s += " and the body"
	}
	return s + " (categories." + c.Name + ".sentinel_headers, sentinel_body)"
}

// swapBody replaces a placeholder in the whole body (bounded) and reports
// whether it was there.
func (p *Proxy) swapBody(ev *reqEvent, req, out *http.Request, from, to string) (bool, *http.Response) {
	b, err := io.ReadAll(io.LimitReader(out.Body, maxSwapBody+1))
	if err != nil {
		// The client's body could not be read (framing, a cut, the
		// category's limit): its fault, not the size of the swap.
		return false, p.bodyError(ev, req, err)
	}
	if len(b) > maxSwapBody {
		d := internalDeny(ruleBodyLimit, "body over "+strconv.Itoa(maxSwapBody)+" bytes: too large to swap a placeholder in")
		d.Category = ev.e.Category
		return false, p.refuse(ev, req, http.StatusRequestEntityTooLarge, d)
	}
	found := bytes.Contains(b, []byte(from))
	b = bytes.ReplaceAll(b, []byte(from), []byte(to))
	out.Body = io.NopCloser(bytes.NewReader(b))
	out.ContentLength = int64(len(b))
	out.TransferEncoding = nil
	return found, nil
}

// scanBody buffers a small body of known length so it can be searched,
// and puts it back for forwarding.
func scanBody(out *http.Request, want bool) ([]byte, error) {
	if !want || out.Body == nil || out.Body == http.NoBody || out.ContentLength <= 0 || out.ContentLength > maxScanBody {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(out.Body, out.ContentLength))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != out.ContentLength {
		return nil, io.ErrUnexpectedEOF
	}
	out.Body = io.NopCloser(bytes.NewReader(b))
	return b, nil
}

// secretEgress blocks a placeholder going to a host it does not belong
// to, or in a position its rule does not name.
func (p *Proxy) secretEgress(ev *reqEvent, req *http.Request, name, reason string) *http.Response {
	ev.e.HTTP.Secret = name
	d := internalDeny(ruleSentinel, reason)
	d.Category = ev.e.Category
	p.log.Warn("proxy: secret egress blocked", "id", ev.e.ID, "sandbox", ev.e.Sandbox, "secret", name,
		"host", ev.e.HTTP.Host, "reason", reason)
	return p.refuse(ev, req, http.StatusForbidden, d)
}
