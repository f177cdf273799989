package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"

	"airlock/policies"
)

// The request facts the policy decides on beyond the request line, and
// the path the request is forwarded with: the policy's normal form, so
// the upstream sees exactly what was matched.

// requestFacts fills in pr what the policy needs from the request's
// headers and (for the requests policies.NeedsBody names) the start of
// its body, and forwards the path in normal form. A path that cannot be
// normalized unambiguously is refused with 400.
func (p *Proxy) requestFacts(x *exch, req *http.Request, pr *policies.Request) *http.Response {
	norm, err := policies.NormalizePath(pr.Path)
	if err != nil {
		return p.refuse(&x.ev, req, http.StatusBadRequest, internalDeny(rulePath, "the request path cannot be normalized unambiguously: "+err.Error()))
	}
	setPath(req.URL, norm)
	x.path = norm
	for _, name := range policies.MethodOverrideHeaders {
		pr.MethodOverrides = append(pr.MethodOverrides, req.Header[name]...)
	}
	pr.ContentType = strings.Join(req.Header["Content-Type"], ",")
	pr.Accept = strings.Join(req.Header["Accept"], ",")
	if !policies.NeedsBody(pr) {
		return nil
	}
	body, truncated, err := peekBody(req, policies.MaxBodyPeek)
	if err != nil {
		return p.bodyError(&x.ev, req, err)
	}
	pr.Body, pr.BodyTruncated = body, truncated
	return nil
}

// setPath makes u's path the normal form norm, byte for byte: RawPath
// is always set, since url.URL would escape sub-delimiters ("!", "'",
// "(", ")", "*") that the normal form keeps.
func setPath(u *url.URL, norm string) {
	if u.EscapedPath() == norm {
		return
	}
	dec, err := url.PathUnescape(norm)
	if err != nil { // normal forms hold only valid escapes
		dec = norm
	}
	u.Path, u.RawPath = dec, norm
}

// peekBody reads up to max bytes of a request body and puts them back in
// front of the rest; truncated says there is more.
func peekBody(req *http.Request, max int) ([]byte, bool, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, false, nil
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, int64(max)+1))
	if err != nil {
		return nil, false, err
	}
	rest := req.Body
	req.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), rest), rest}
	if len(b) > max {
		return b[:max], true, nil
	}
	return b, false, nil
}

// tagPackage records in the request's event the package the policy
// recognized, or else the one the path names from the root (a package
// fetched through a category without package rules).
func (p *Proxy) tagPackage(x *exch, v policies.Verdict, host, path string) {
	pkg := v.Package
	if pkg.Ecosystem == "" {
		var ok bool
		if pkg, ok = policies.RecognizePackage(host, path); !ok {
			return
		}
	}
	x.pkg, x.evPkg = pkg, packageOf(pkg)
	x.ev.e.HTTP.Package = &x.evPkg
}
