package policies

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"airlock/internal/tomlpos"
)

// TestCase is one [[tests]] entry: a request line and the expected verdict.
type TestCase struct {
	Name      string // optional label
	Line      string // the request line as written
	Request   Request
	Expect    Action
	Rule      string // expected rule name; "" = not checked
	Category  string // expected category; "" = not checked
	WouldDeny *bool  // expected would_deny; nil = not checked
	Pos       Position
}

// TestResult is the outcome of one TestCase.
type TestResult struct {
	Case    TestCase
	Verdict Verdict
	Pass    bool
	// Problems says what differed, one line each ("want deny, got allow").
	Problems []string
}

// ParseRequest reads a request line as tests and `airlock policy explain`
// write them:
//
//	GET https://git.example.test/org/repo/info/refs?service=git-upload-pack
//	dns NAME [QTYPE]
//	connect HOST:PORT
//
// Each form may end with options: ip=ADDR (the destination address),
// sni=NAME (connect), package=ECO:NAME[@VERSION] (http).
func ParseRequest(line string) (Request, error) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return Request{}, errors.New("want \"METHOD URL\", \"dns NAME [TYPE]\" or \"connect HOST:PORT\"")
	}
	var r Request
	var opts []string
	switch strings.ToLower(f[0]) {
	case "dns":
		r.Stage, r.Host = StageDNS, f[1]
		rest := f[2:]
		if len(rest) > 0 && !strings.Contains(rest[0], "=") {
			t, ok := ParseQType(rest[0])
			if !ok {
				return Request{}, fmt.Errorf("unknown DNS query type %q", rest[0])
			}
			r.QType, rest = t, rest[1:]
		} else {
			r.QType = 1
		}
		opts = rest
	case "connect":
		r.Stage = StageConnect
		host, port := splitHostPort(f[1])
		if port == 0 {
			return Request{}, errors.New("connect needs HOST:PORT")
		}
		r.Host, r.Port, opts = host, port, f[2:]
	default:
		if err := parseHTTPLine(&r, f[0], f[1]); err != nil {
			return Request{}, err
		}
		opts = f[2:]
	}
	for _, o := range opts {
		if err := applyOption(&r, o); err != nil {
			return Request{}, err
		}
	}
	return r, nil
}

func parseHTTPLine(r *Request, method, url string) error {
	for i := 0; i < len(method); i++ {
		if c := method[i]; c < 'A' || c > 'Z' {
			return fmt.Errorf("%q is not an upper-case HTTP method (nor dns or connect)", method)
		}
	}
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok || (scheme != "https" && scheme != "http") {
		return errors.New("want an absolute http:// or https:// URL")
	}
	authority, path := rest, "/"
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if strings.HasPrefix(path, "?") {
		path = "/" + path
	}
	path, query, _ := strings.Cut(path, "?")
	host, port := splitHostPort(authority)
	if host == "" {
		return errors.New("URL has no host")
	}
	if strings.Contains(authority, "@") {
		return errors.New("URL user information is not supported")
	}
	r.Stage, r.Method, r.Scheme = StageHTTP, method, scheme
	r.Host, r.Port, r.Path, r.Query = host, port, path, query
	if r.Port == 0 {
		r.Port = 443
		if scheme == "http" {
			r.Port = 80
		}
	}
	return nil
}

func applyOption(r *Request, o string) error {
	k, v, ok := strings.Cut(o, "=")
	if !ok {
		return fmt.Errorf("unexpected %q (options are ip=, sni=, package=)", o)
	}
	switch k {
	case "ip":
		a, err := netip.ParseAddr(v)
		if err != nil {
			return fmt.Errorf("ip: %v", err)
		}
		r.IP = a
	case "sni":
		r.SNI = v
	case "package":
		eco, rest, ok := strings.Cut(v, ":")
		if !ok || !contains(ecosystems, eco) {
			return fmt.Errorf("package: want ECOSYSTEM:NAME[@VERSION]")
		}
		pkg := &Package{Ecosystem: eco, Name: rest}
		if i := strings.LastIndexByte(rest, '@'); i > 0 {
			pkg.Name, pkg.Version = rest[:i], rest[i+1:]
		}
		r.Package = pkg
	default:
		return fmt.Errorf("unknown option %q (options are ip=, sni=, package=)", k)
	}
	return nil
}

func parseAction(s string) (Action, bool) {
	for i, n := range actionNames {
		if n == s {
			return Action(i), true
		}
	}
	return ActionDeny, false
}

func (l *loader) testsSection(p *Policy, tests *list) {
	for i, it := range tests.items {
		path := tomlpos.Elem("tests", i)
		m, ok := it.(map[string]any)
		if !ok {
			l.errf(path, "want a [[tests]] table, got %s", tomlType(it))
			continue
		}
		var w wireTest
		l.decode(m, path, &w, nil)
		tc := TestCase{Pos: l.pos(path)}
		if w.Name != nil {
			tc.Name = *w.Name
		}
		if w.Request == nil {
			if _, present := m["request"]; !present {
				l.errf(path, "request: required (such as \"GET https://host.example.test/\")")
			}
		} else if r, err := ParseRequest(*w.Request); err != nil {
			l.errf(tomlpos.Join(path, "request"), "%q: %v", *w.Request, err)
		} else {
			tc.Line, tc.Request = *w.Request, r
		}
		if w.Expect == nil {
			if _, present := m["expect"]; !present {
				l.errf(path, "expect: required (\"allow\", \"deny\", \"ask\" or \"audit\")")
			}
		} else if a, ok := parseAction(*w.Expect); !ok {
			l.errf(tomlpos.Join(path, "expect"), "unknown verdict %q (want \"allow\", \"deny\", \"ask\" or \"audit\")", *w.Expect)
		} else {
			tc.Expect = a
		}
		if w.Rule != nil {
			tc.Rule = *w.Rule
		}
		if w.Category != nil {
			tc.Category = *w.Category
		}
		tc.WouldDeny = w.WouldDeny
		p.tests = append(p.tests, tc)
	}
}

// RunTests decides every embedded test and compares.
func (p *Policy) RunTests() []TestResult {
	out := make([]TestResult, 0, len(p.tests))
	for _, tc := range p.tests {
		v := p.Decide(tc.Request)
		res := TestResult{Case: tc, Verdict: v}
		if v.Action != tc.Expect {
			res.Problems = append(res.Problems, "want "+tc.Expect.String()+", got "+v.Action.String())
		}
		if tc.Rule != "" && v.Rule.Name != tc.Rule {
			res.Problems = append(res.Problems, "want rule "+tc.Rule+", got "+v.Rule.Name)
		}
		if tc.Category != "" && v.Category != tc.Category {
			res.Problems = append(res.Problems, "want category "+strconv.Quote(tc.Category)+", got "+strconv.Quote(v.Category))
		}
		if tc.WouldDeny != nil && v.WouldDeny != *tc.WouldDeny {
			res.Problems = append(res.Problems, fmt.Sprintf("want would_deny = %t, got %t", *tc.WouldDeny, v.WouldDeny))
		}
		res.Pass = len(res.Problems) == 0
		out = append(out, res)
	}
	return out
}
