// Package policies owns Airlock's TOML egress policy language: parsing with
// positioned errors, validation, the compiled matcher and Decide, a pure
// function from a request description to a verdict naming its rule.
//
// Nothing here does I/O beyond reading policy files: no sockets, no podman,
// no logging.
package policies

import (
	"fmt"
	"net/netip"
)

// Action is what a verdict tells the enforcing mechanism to do.
// The zero value is ActionDeny: an unset or unknown action fails closed.
type Action uint8

const (
	ActionDeny  Action = iota // refuse; the zero value
	ActionAllow               // let it through
	ActionAsk                 // hold and ask a human; a hold that times out is a deny
	ActionAudit               // let it through and flag it for review
)

var actionNames = [...]string{"deny", "allow", "ask", "audit"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Allows reports whether the mechanism may let the request through now
// (allow and audit; ask must wait for an approval).
func (a Action) Allows() bool { return a == ActionAllow || a == ActionAudit }

// Mode is a policy's or category's enforcement mode.
type Mode uint8

const (
	ModeEnforce Mode = iota // deny what the policy denies
	ModeAudit               // allow, but record would_deny
)

func (m Mode) String() string {
	if m == ModeAudit {
		return "audit"
	}
	return "enforce"
}

// Kind is a category kind.
type Kind uint8

const (
	KindNone Kind = iota // no category decided (default deny, [deny] section)
	KindRegistries
	KindGit
	KindInternalAPI
	KindWebhooks
	KindPublicWeb
)

var kindNames = [...]string{"", "registries", "git", "internal_api", "webhooks", "public_web"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Stage says which part of a request a Request describes.
type Stage uint8

const (
	StageDNS     Stage = iota + 1 // a name lookup (Host, QType)
	StageConnect                  // a connection: Host and/or IP, Port, SNI
	StageHTTP                     // one HTTP request: Method, Scheme, Host, Port, Path, Query
)

func (s Stage) String() string {
	switch s {
	case StageDNS:
		return "dns"
	case StageConnect:
		return "connect"
	case StageHTTP:
		return "http"
	}
	return fmt.Sprintf("stage(%d)", uint8(s))
}

// Package is a package download the proxy recognized from a request path.
type Package struct {
	Ecosystem string // npm, pypi, go, debian, crates
	Name      string
	Version   string
}

// Request describes one stage of one egress attempt. Decide does not keep it.
type Request struct {
	Stage  Stage
	Host   string     // DNS name, SNI, CONNECT authority or Host header; raw (Decide normalizes)
	IP     netip.Addr // the destination address when known (connect stage); zero when not
	Port   uint16
	SNI    string // TLS server name, if any (connect stage)
	Method string // http stage
	Scheme string // "https" or "http"
	Path   string // raw request path (http stage); Decide matches on its normalized form
	Query  string // raw query string without '?'
	QType  uint16 // DNS query type (dns stage), numeric as on the wire
	// Package, when set, is the package the request fetches (a policy
	// test's package= option, a replayed event); when nil, Decide
	// recognizes it from the path with the category's path_prefix.
	Package *Package
	// Lock is the lockfiles the sandbox was created with (nil: none). On
	// the connect stage a registries category that is not inspected is
	// refused for it: its downloads would be spliced past the lockfiles.
	// On the http stage, in a registries category, a version they do not
	// list is denied (not_in_lockfile), and so is a path that is neither
	// a package nor registry metadata.
	Lock *LockSet

	// Request facts the proxy supplies on the http stage (see facts.go).
	// MethodOverrides are the values of the method-override headers
	// (MethodOverrideHeaders), each decided as the method it names.
	MethodOverrides []string
	ContentType     string // the Content-Type header
	Accept          string // the Accept header, values joined with ","
	// Body is the start of the request body when NeedsBody asked for it;
	// BodyTruncated says the body goes on beyond it.
	Body          []byte
	BodyTruncated bool
}

// Position is a place in a policy file.
type Position struct {
	File string
	Line int
	Col  int
}

func (p Position) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Rule names the rule that decided: a stable name such as
// "categories.git.push" or "deny.hosts[0]" or "default", and where it is.
type Rule struct {
	Name string
	Pos  Position
}

func (r Rule) String() string {
	if r.Pos.File == "" {
		return r.Name
	}
	return r.Name + " (" + r.Pos.String() + ")"
}

// Verdict is the outcome of Decide.
type Verdict struct {
	// Action is what to do on the wire. In audit mode a would-be denial
	// comes back as ActionAudit with WouldDeny set.
	Action Action
	// WouldDeny is true only on an audit verdict that enforce mode would
	// have denied (docs/events.md, would_deny); false on a deny verdict.
	WouldDeny bool
	Kind      Kind
	Category  string // category name, "" when none decided
	Rule      Rule
	Reason    string // short, for people: why this rule decided
	// Package is the package the decision recognized in the request path
	// (http stage, registries); its Ecosystem is "" when none.
	Package Package
	// Cat is the compiled category that decided, nil when none did. The
	// mechanism reads per-category settings (inspect, inject, limits) from it.
	Cat *Category
}

// Category is a compiled category: what the mechanism needs to enforce a
// verdict beyond its action. Fields are read-only after Load.
type Category struct {
	Name    string
	Kind    Kind
	Mode    Mode
	Action  Action
	Inspect bool // MITM and decide per request; false: decide on SNI, splice
	HTTP    bool // plain http (port 80) allowed
	// CIDRs are the address ranges the category names. A non-public address
	// (see Classify) is reachable only when a category's CIDRs contain it.
	CIDRs []netip.Prefix
	// Inject is the credential the proxy adds after interception, nil if none.
	Inject *Inject
	// Sentinels are secret names whose placeholders may be swapped for the
	// real value only toward this category's hosts.
	Sentinels []string
	// SentinelBody allows swapping sentinels inside request bodies too.
	SentinelBody bool
	MaxBody      int64    // webhooks: maximum request body in bytes; 0 = no limit
	Rate         Rate     // webhooks: request rate limit; zero = none
	LogQuery     bool     // request events keep the query string
	DNSTypes     []uint16 // extra DNS query types allowed for its names (e.g. TXT)
	Pos          Position

	// Hosts are the category's normalized host patterns ("*.example.test").
	Hosts []string
	// Ports are the TCP ports the category allows (default 443, plus 80
	// when HTTP is set).
	Ports []PortRange
	// Methods are the HTTP methods the category allows; "*" means any.
	Methods []string
	// SentinelHeaders are the request header fields (canonical names) a
	// sentinel's placeholder is swapped in; anywhere else it is refused.
	// Default Authorization.
	SentinelHeaders []string

	r catRules // compiled rules, see category.go
}

// Inject describes a credential the proxy sets on matching requests.
type Inject struct {
	Header string // e.g. "Authorization"
	Secret string // secret name in the appliance's secret store
	Format string // e.g. "Bearer {}"; "{}" is replaced by the secret value
}

// Value renders the header value for a secret.
func (in *Inject) Value(secret string) string {
	out := make([]byte, 0, len(in.Format)+len(secret))
	for i := 0; i < len(in.Format); i++ {
		if i+1 < len(in.Format) && in.Format[i] == '{' && in.Format[i+1] == '}' {
			out = append(out, secret...)
			i++
			continue
		}
		out = append(out, in.Format[i])
	}
	return string(out)
}

// Rate is N events per Per.
type Rate struct {
	N   int
	Per int64 // nanoseconds (a time.Duration)
}

// BlockAnswer is how dnsd answers a denied name.
type BlockAnswer uint8

const (
	BlockNXDomain BlockAnswer = iota
	BlockRefused
)

// DNSConfig is a policy's [dns] section with defaults applied.
type DNSConfig struct {
	Upstreams        []string // host:port; empty means the appliance's configured upstreams
	Block            BlockAnswer
	MaxLabel         int      // default 63
	MaxName          int      // default 253
	QueriesPerMinute int      // per sandbox; 0 = unlimited
	QueriesPerSecond int      // per sandbox, a burst cap beside QueriesPerMinute; 0 = unlimited
	NamesPerParent   int      // distinct names per parent domain per minute; 0 = unlimited
	QTypes           []uint16 // allowed query types (default A, AAAA, CNAME, HTTPS, SVCB, MX, SRV)
}
