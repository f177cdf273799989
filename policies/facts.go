package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// Request facts beyond the request line: the headers that name another
// method, the media types that mark DNS over HTTPS, and the body of a Git
// LFS batch request. The proxy supplies them; Decide reads them here.

// MethodOverrideHeaders are the headers frameworks read as the request's
// real method. The proxy passes their values in Request.MethodOverrides.
var MethodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// MaxBodyPeek bounds Request.Body: the proxy reads at most this much of a
// body that NeedsBody asks for before deciding.
const MaxBodyPeek = 64 << 10

var errOverride = errors.New("a method override is not a single HTTP method")

// overrideMethods returns the methods a request's override headers and
// "_method" query parameters name, upper-cased; an empty or malformed one
// is an error (decided as a deny).
func overrideMethods(r *Request) ([]string, error) {
	if len(r.MethodOverrides) == 0 && !containsFoldDecoded(r.Query, "method") {
		return nil, nil
	}
	var out []string
	for _, v := range r.MethodOverrides {
		m, ok := overrideToken(v)
		if !ok {
			return nil, errOverride
		}
		out = append(out, m)
	}
	for _, v := range queryValues(r.Query, "_method") {
		m, ok := overrideToken(v)
		if !ok {
			return nil, errOverride
		}
		out = append(out, m)
	}
	return out, nil
}

// overrideToken is an override value as the method it names: trimmed and
// upper-cased (frameworks upper-case it), one token.
func overrideToken(v string) (string, bool) {
	v = strings.ToUpper(strings.TrimSpace(v))
	if v == "" {
		return "", false
	}
	for i := 0; i < len(v); i++ {
		if !(v[i] >= 'A' && v[i] <= 'Z' || v[i] == '-' || v[i] == '_') {
			return "", false
		}
	}
	return v, true
}

// queryValues returns the values of every parameter of the query whose
// name, percent-decoded and case-folded, is key.
func queryValues(query, key string) []string {
	var out []string
	for part := range strings.SplitSeq(query, "&") {
		for sub := range strings.SplitSeq(part, ";") {
			k, v, _ := strings.Cut(sub, "=")
			k = strings.ReplaceAll(decodeAll(k), "+", " ")
			if strings.EqualFold(strings.TrimSpace(k), key) {
				out = append(out, strings.ReplaceAll(decodeAll(v), "+", " "))
			}
		}
	}
	return out
}

// dohTypes are the media types of DNS over HTTPS (RFC 8484, and the JSON
// form public resolvers serve).
var dohTypes = []string{"application/dns-message", "application/dns-json"}

// dohShape says why a request looks like DNS over HTTPS, or "".
func dohShape(r *Request) string {
	for _, t := range dohTypes {
		if containsFold(r.ContentType, t) {
			return "Content-Type " + t
		}
		if containsFold(r.Accept, t) {
			return "Accept " + t
		}
	}
	if r.Query != "" && len(queryValues(r.Query, "dns")) > 0 {
		return "a dns= query parameter"
	}
	return ""
}

// NeedsBody reports whether deciding a request needs the start of its
// body (Request.Body): a Git LFS batch request, whose body says whether it
// downloads or uploads.
func NeedsBody(r *Request) bool {
	if r.Method != "POST" {
		return false
	}
	p, err := NormalizePath(r.Path)
	return err == nil && isLFSBatch(p)
}

// isLFSBatch: ".../info/lfs/objects/batch" (any letter case; the LFS
// API's batch endpoint).
func isLFSBatch(path string) bool {
	d := strings.ToLower(decodeAll(path))
	return strings.HasSuffix(strings.TrimSuffix(d, "/"), "/objects/batch")
}

// isUploadPack: the fetch endpoint of smart HTTP, ".../git-upload-pack".
func isUploadPack(path string) bool {
	d := strings.ToLower(decodeAll(path))
	return strings.HasSuffix(d, "/git-upload-pack")
}

// lfsOperation returns the "operation" of an LFS batch request body: every
// top-level "operation" key, in any letter case (a repeated key is read differently by
// different servers) must say the same. A body that is not one complete
// JSON object is an error.
func lfsOperation(body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return "", errors.New("not a JSON object")
	}
	op := ""
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return "", err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", err
		}
		// Go servers match JSON keys to fields without regard to case.
		if k, _ := kt.(string); !strings.EqualFold(k, "operation") {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", errors.New("operation is not a string")
		}
		if op != "" && s != op {
			return "", errors.New("operation given twice, differently")
		}
		op = s
	}
	if _, err := dec.Token(); err != nil {
		return "", err
	}
	if dec.More() {
		return "", errors.New("bytes after the JSON object")
	}
	if op == "" {
		return "", errors.New("no operation")
	}
	return op, nil
}

// gitWrite says why a request to a git category with push = false writes,
// or "": a push (git-receive-pack), an LFS upload, an object PUT, or any
// other write that is not a fetch.
func gitWrite(r *Request, path string) string {
	if isReceivePack(path, r.Query) {
		return "git push (git-receive-pack) is not allowed"
	}
	switch r.Method {
	case "GET", "HEAD", "OPTIONS":
		return ""
	case "POST":
	default:
		return r.Method + " writes to the repository (such as an LFS object upload)"
	}
	if isUploadPack(path) {
		return ""
	}
	if !isLFSBatch(path) {
		return "POST to an endpoint other than git-upload-pack or the LFS batch API"
	}
	if r.BodyTruncated {
		return "LFS batch request larger than the proxy reads to check it"
	}
	op, err := lfsOperation(r.Body)
	if err != nil {
		return "LFS batch request the proxy cannot read (" + err.Error() + ")"
	}
	if op != "download" {
		return "LFS batch operation " + op + " (only download is allowed)"
	}
	return ""
}
