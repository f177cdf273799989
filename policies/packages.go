package policies

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"airlock/internal/tomlpos"
)

var ecosystems = []string{"npm", "pypi", "go", "debian", "crates"}

// RecognizePackage recognizes a package download or metadata fetch from a
// request path, for npm, PyPI, the Go module proxy, Debian and crates
// repositories. The host is not needed today (registries sit on any host,
// often behind a path prefix) but is part of the signature so mirrors can
// be told apart later. Version is empty for metadata requests.
func RecognizePackage(host, p string) (Package, bool) {
	_ = host
	if p == "" || p[0] != '/' {
		return Package{}, false
	}
	d := decodeAll(p)
	if i := strings.IndexByte(d, '?'); i >= 0 {
		d = d[:i]
	}
	for _, f := range []func(string) (Package, bool){recognizeGo, recognizePyPI, recognizeDebian, recognizeCrates, recognizeNPM} {
		if pkg, ok := f(d); ok {
			return pkg, true
		}
	}
	return Package{}, false
}

func recognizeGo(p string) (Package, bool) {
	if mod, ok := strings.CutSuffix(p, "/@latest"); ok && len(mod) > 1 {
		return Package{Ecosystem: "go", Name: decodeGoPath(mod[1:])}, true
	}
	i := strings.Index(p, "/@v/")
	if i <= 0 {
		return Package{}, false
	}
	mod, file := p[1:i], p[i+4:]
	pkg := Package{Ecosystem: "go", Name: decodeGoPath(mod)}
	if file == "list" {
		return pkg, true
	}
	for _, ext := range []string{".info", ".mod", ".zip"} {
		if v, ok := strings.CutSuffix(file, ext); ok && v != "" && !strings.Contains(v, "/") {
			pkg.Version = decodeGoPath(v)
			return pkg, true
		}
	}
	return Package{}, false
}

// decodeGoPath undoes the module proxy's case encoding ("!a" -> "A").
func decodeGoPath(s string) string {
	if !strings.Contains(s, "!") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '!' && i+1 < len(s) && s[i+1] >= 'a' && s[i+1] <= 'z' {
			b.WriteByte(s[i+1] - 'a' + 'A')
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

var pyExts = []string{".tar.gz", ".tar.bz2", ".tgz", ".zip", ".whl", ".egg", ".whl.metadata", ".tar.gz.metadata"}

func recognizePyPI(p string) (Package, bool) {
	if i := strings.Index(p, "/simple/"); i >= 0 {
		rest := strings.Trim(p[i+8:], "/")
		if rest != "" && !strings.Contains(rest, "/") {
			return Package{Ecosystem: "pypi", Name: pep503(rest)}, true
		}
		return Package{}, false
	}
	if i := strings.Index(p, "/pypi/"); i >= 0 {
		parts := strings.Split(strings.Trim(p[i+6:], "/"), "/")
		if len(parts) == 2 && parts[1] == "json" {
			return Package{Ecosystem: "pypi", Name: pep503(parts[0])}, true
		}
		if len(parts) == 3 && parts[2] == "json" {
			return Package{Ecosystem: "pypi", Name: pep503(parts[0]), Version: parts[1]}, true
		}
	}
	if !strings.Contains(p, "/packages/") {
		return Package{}, false
	}
	file := path.Base(p)
	for _, ext := range pyExts {
		stem, ok := strings.CutSuffix(file, ext)
		if !ok {
			continue
		}
		if strings.HasPrefix(ext, ".whl") || ext == ".egg" {
			parts := strings.Split(stem, "-")
			if len(parts) >= 2 && parts[0] != "" && parts[1] != "" {
				return Package{Ecosystem: "pypi", Name: pep503(parts[0]), Version: parts[1]}, true
			}
			return Package{}, false
		}
		i := strings.LastIndexByte(stem, '-')
		if i > 0 && i < len(stem)-1 {
			return Package{Ecosystem: "pypi", Name: pep503(stem[:i]), Version: stem[i+1:]}, true
		}
	}
	return Package{}, false
}

// pep503 normalizes a Python project name: lower case, runs of -_. as "-".
func pep503(s string) string {
	var b strings.Builder
	dash := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' || c == '_' || c == '.' {
			dash = true
			continue
		}
		if dash && b.Len() > 0 {
			b.WriteByte('-')
		}
		dash = false
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// AptUnescape undoes two escapes apt writes in every request path ('+'
// and '~' as %2B and %7E: its QuoteString). A server reads them one way,
// and Debian's file names and versions are full of both.
func AptUnescape(p string) string { return aptUnescape.Replace(p) }

var aptUnescape = strings.NewReplacer("%2B", "+", "%2b", "+", "%7E", "~", "%7e", "~")

func recognizeDebian(p string) (Package, bool) {
	if !strings.Contains(p, "/pool/") {
		return Package{}, false
	}
	file := AptUnescape(path.Base(p))
	for _, ext := range []string{".deb", ".udeb", ".ddeb"} {
		if stem, ok := strings.CutSuffix(file, ext); ok {
			parts := strings.Split(stem, "_")
			if len(parts) == 3 && parts[0] != "" && parts[1] != "" {
				return Package{Ecosystem: "debian", Name: parts[0], Version: parts[1]}, true
			}
		}
	}
	if stem, ok := strings.CutSuffix(file, ".dsc"); ok {
		if name, ver, ok := strings.Cut(stem, "_"); ok && name != "" && ver != "" {
			return Package{Ecosystem: "debian", Name: name, Version: ver}, true
		}
	}
	return Package{}, false
}

func recognizeCrates(p string) (Package, bool) {
	if i := strings.Index(p, "/api/v1/crates/"); i >= 0 {
		parts := strings.Split(strings.Trim(p[i+15:], "/"), "/")
		if len(parts) == 3 && parts[2] == "download" && parts[0] != "" && parts[1] != "" {
			return Package{Ecosystem: "crates", Name: strings.ToLower(parts[0]), Version: parts[1]}, true
		}
		return Package{}, false
	}
	var last [3]string
	segs := lastSegs(strings.Trim(p, "/"), &last)
	n := len(segs)
	if n >= 3 && segs[n-3] == "crates" {
		name := segs[n-2]
		if v, ok := strings.CutPrefix(segs[n-1], name+"-"); ok {
			if v, ok = strings.CutSuffix(v, ".crate"); ok && v != "" {
				return Package{Ecosystem: "crates", Name: strings.ToLower(name), Version: v}, true
			}
		}
	}
	return recognizeSparseIndex(segs)
}

// lastSegs is the tail of strings.Split(s, "/"), at most its last three
// segments, in out (no allocation on a path of every request): the
// crates forms need no more.
func lastSegs(s string, out *[3]string) []string {
	n := 0
	for end := len(s); n < len(out); n++ {
		i := strings.LastIndexByte(s[:end], '/')
		out[len(out)-1-n] = s[i+1 : end]
		if i < 0 {
			n++
			break
		}
		end = i
	}
	return out[len(out)-n:]
}

// recognizeSparseIndex: 1/{n}, 2/{n}, 3/{c}/{n}, {ab}/{cd}/{name}; segs
// are the path's last segments (at most three).
func recognizeSparseIndex(segs []string) (Package, bool) {
	n := len(segs)
	if n < 2 {
		return Package{}, false
	}
	name := strings.ToLower(segs[n-1])
	if !crateName(name) {
		return Package{}, false
	}
	ok := false
	switch {
	case len(name) == 1:
		ok = segs[n-2] == "1"
	case len(name) == 2:
		ok = segs[n-2] == "2"
	case len(name) == 3:
		ok = n >= 3 && segs[n-3] == "3" && strings.ToLower(segs[n-2]) == name[:1]
	default:
		ok = n >= 3 && strings.ToLower(segs[n-3]) == name[:2] && strings.ToLower(segs[n-2]) == name[2:4]
	}
	if !ok {
		return Package{}, false
	}
	return Package{Ecosystem: "crates", Name: name}, true
}

func crateName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func recognizeNPM(p string) (Package, bool) {
	rest := strings.TrimPrefix(p, "/")
	if strings.HasPrefix(rest, "-/") || rest == "" {
		return Package{}, false
	}
	name, tail, hasTarball := strings.Cut(rest, "/-/")
	if hasTarball {
		if !npmName(name) {
			return Package{}, false
		}
		base := name[strings.LastIndexByte(name, '/')+1:]
		v, ok := strings.CutPrefix(tail, base+"-")
		if !ok {
			return Package{}, false
		}
		if v, ok = strings.CutSuffix(v, ".tgz"); ok && v != "" && !strings.Contains(v, "/") {
			return Package{Ecosystem: "npm", Name: strings.ToLower(name), Version: v}, true
		}
		return Package{}, false
	}
	rest = strings.TrimSuffix(rest, "/")
	if npmName(rest) {
		return Package{Ecosystem: "npm", Name: strings.ToLower(rest)}, true
	}
	return Package{}, false
}

// npmName: "name" or "@scope/name".
func npmName(s string) bool {
	if strings.HasPrefix(s, "@") {
		scope, name, ok := strings.Cut(s[1:], "/")
		return ok && npmPart(scope) && npmPart(name)
	}
	return npmPart(s)
}

func npmPart(s string) bool {
	if s == "" || len(s) > 214 || s[0] == '.' || s[0] == '_' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if !(c >= 'a' && c <= 'z' || s[i] >= '0' && s[i] <= '9' || strings.IndexByte("-._~", s[i]) >= 0) {
			return false
		}
	}
	return true
}

// pkgPattern is "ecosystem:name-glob" with an optional version constraint
// ("pypi:requests<2.0").
type pkgPattern struct {
	eco  string
	name string // lower case; '*' matches any run of characters
	op   string // "", "<", "<=", ">", ">=", "==", "!="
	ver  string
	rule Rule
	raw  string
}

func parsePkgPattern(s string) (pkgPattern, error) {
	eco, rest, ok := strings.Cut(s, ":")
	if !ok || !contains(ecosystems, eco) {
		return pkgPattern{}, fmt.Errorf("want ECOSYSTEM:NAME with ECOSYSTEM one of %s", quoteList(ecosystems))
	}
	pp := pkgPattern{eco: eco, raw: s}
	if i := strings.IndexAny(rest, "<>=!"); i >= 0 {
		opEnd := i
		for opEnd < len(rest) && strings.IndexByte("<>=!", rest[opEnd]) >= 0 {
			opEnd++
		}
		pp.op, pp.ver = rest[i:opEnd], strings.TrimSpace(rest[opEnd:])
		rest = strings.TrimSpace(rest[:i])
		if pp.op == "=" {
			pp.op = "=="
		}
		if !oneOf(pp.op, "<", "<=", ">", ">=", "==", "!=") || pp.ver == "" {
			return pkgPattern{}, errors.New("version constraint: want one of <, <=, >, >=, ==, != followed by a version")
		}
	}
	if rest == "" {
		return pkgPattern{}, errors.New("empty package name")
	}
	if strings.ContainsAny(rest, " \t") {
		return pkgPattern{}, errors.New("spaces in package name")
	}
	pp.name = matchName(eco, rest)
	return pp, nil
}

// matchName is the form names are compared in: case-insensitive, and for
// PyPI normalized as PEP 503 says (keeping '*').
func matchName(eco, name string) string {
	if eco == "pypi" {
		parts := strings.Split(name, "*")
		for i := range parts {
			parts[i] = pep503(parts[i])
		}
		return strings.Join(parts, "*")
	}
	return strings.ToLower(name)
}

// match reports whether a package matches. A request without a version
// (metadata) matches a pattern with a version constraint only when
// anyVersion is set: allow lists let the index through, deny lists block
// what they can see.
func (pp *pkgPattern) match(pkg *Package) bool { return pp.matchVersion(pkg, false) }

func (pp *pkgPattern) matchVersion(pkg *Package, anyVersion bool) bool {
	if pp.eco != pkg.Ecosystem || !globMatch(pp.name, matchName(pkg.Ecosystem, pkg.Name)) {
		return false
	}
	if pp.op == "" {
		return true
	}
	if pkg.Version == "" {
		return anyVersion // metadata: no version to compare
	}
	c := compareVersions(pkg.Version, pp.ver)
	switch pp.op {
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	case "==":
		return c == 0
	case "!=":
		return c != 0
	}
	return false
}

// globMatch matches '*' as any run of characters (including '/').
func globMatch(pat, s string) bool {
	px, sx := 0, 0
	nextP, nextS := -1, -1
	for px < len(pat) || sx < len(s) {
		if px < len(pat) {
			if pat[px] == '*' {
				nextP, nextS = px, sx+1
				px++
				continue
			}
			if sx < len(s) && pat[px] == s[sx] {
				px++
				sx++
				continue
			}
		}
		if nextS > 0 && nextS <= len(s) {
			px, sx = nextP, nextS
			continue
		}
		return false
	}
	return true
}

// compareVersions compares dotted versions segment by segment: numbers
// numerically, other parts as text; missing segments count as zero.
func compareVersions(a, b string) int {
	ta, tb := versionTokens(a), versionTokens(b)
	for i := 0; i < max(len(ta), len(tb)); i++ {
		x, y := "0", "0"
		if i < len(ta) {
			x = ta[i]
		}
		if i < len(tb) {
			y = tb[i]
		}
		if c := compareToken(x, y); c != 0 {
			return c
		}
	}
	return 0
}

func versionTokens(v string) []string {
	v = strings.TrimPrefix(strings.ToLower(v), "v")
	var out []string
	cur := ""
	digit := false
	flush := func() {
		if cur != "" {
			out = append(out, cur)
		}
		cur = ""
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		isD := c >= '0' && c <= '9'
		switch {
		case c == '.' || c == '-' || c == '_' || c == '+' || c == '~' || c == ':':
			flush()
			continue
		case cur != "" && isD != digit:
			flush()
		}
		digit = isD
		cur += string(c)
	}
	flush()
	return out
}

func compareToken(x, y string) int {
	xd, yd := isDigits(x), isDigits(y)
	switch {
	case xd && yd:
		x, y = strings.TrimLeft(x, "0"), strings.TrimLeft(y, "0")
		if len(x) != len(y) {
			if len(x) < len(y) {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	case xd: // 1.0.0 > 1.0.0rc1: a number beats a pre-release tag
		return 1
	case yd:
		return -1
	}
	return strings.Compare(x, y)
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// isPublish reports whether a registry request writes: any PUT, PATCH or
// DELETE (npm publish, unpublish and dist-tags; crates publish, yank and
// owners), and POST to upload endpoints (PyPI legacy upload, crates new).
func isPublish(method, p string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS":
		return false
	case "PUT", "PATCH", "DELETE":
		return true
	}
	d := strings.ToLower(decodeAll(p))
	return strings.Contains(d, "/legacy") || strings.Contains(d, "/upload") ||
		strings.Contains(d, "/api/v1/crates/new") || method != "POST"
}

func (l *loader) registryKeys(c *Category, w *wireCategory) {
	path := c.r.path
	c.r.publish = flag(w.Publish, false)
	c.r.publishRule = l.rule(tomlpos.Join(path, "publish"))
	l.pathPrefixes(c, w.PathPrefix)
	pm := w.Packages
	if pm == nil {
		return
	}
	ppath := tomlpos.Join(path, "packages")
	c.r.pkgRule = l.rule(ppath)
	c.r.unrecognized = "path is not a package download or metadata request " + c.r.path +
		" recognizes; a category with packages rules denies the rest"
	if len(c.r.prefixes) > 0 {
		c.r.unrecognized += " (path_prefix: " + strings.Join(c.r.prefixes, ", ") + ")"
	} else {
		c.r.unrecognized += " (set path_prefix if the registry sits under a prefix)"
	}
	c.r.pkgAllowEco = map[string]Rule{}
	for _, key := range []string{"allow", "deny"} {
		list := &pm.Allow
		if key == "deny" {
			list = &pm.Deny
		}
		paths := list.paths
		for i, s := range list.vals {
			pp, err := parsePkgPattern(s)
			if err != nil {
				l.errf(paths[i], "%q: %v", s, err)
				continue
			}
			pp.rule = l.rule(paths[i])
			if key == "allow" {
				c.r.pkgAllow = append(c.r.pkgAllow, pp)
				if _, seen := c.r.pkgAllowEco[pp.eco]; !seen {
					c.r.pkgAllowEco[pp.eco] = l.rule(tomlpos.Join(ppath, "allow"))
				}
			} else {
				c.r.pkgDeny = append(c.r.pkgDeny, pp)
			}
		}
	}
}

// pathPrefixes reads path_prefix: a string or a list of strings, each a
// path in normal form that starts and ends with "/".
func (l *loader) pathPrefixes(c *Category, v any) {
	if v == nil {
		return
	}
	key := tomlpos.Join(c.r.path, "path_prefix")
	var list, paths []string
	if s, isStr := v.(string); isStr {
		list, paths = []string{s}, []string{key}
	} else {
		var w strs
		w.take(l, v, key)
		list, paths = w.vals, w.paths
		if len(list) == 0 {
			l.errf(key, "empty: list the path prefixes the registry sits under, or remove the key")
		}
	}
	for i, s := range list {
		n, err := NormalizePath(s)
		switch {
		case err != nil:
			l.errf(paths[i], "%q: %v", s, err)
		case n != s || !strings.HasSuffix(s, "/") || strings.Contains(s, "*"):
			l.errf(paths[i], "%q: want a path in normal form that starts and ends with \"/\", such as \"/api/npm/npm-remote/\"", s)
		default:
			c.r.prefixes = append(c.r.prefixes, s)
		}
	}
}

// mirrorLayouts are the path layouts of common repository managers, in
// the order they are tried; "*" stands for the repository's name.
// Artifactory: /artifactory/api/npm/REPO/..., /api/npm/REPO/...,
// /artifactory/REPO/...; Nexus: /repository/REPO/...,
// /nexus/repository/REPO/....
var mirrorLayouts = [][]string{
	{"artifactory", "api", "*", "*"},
	{"api", "*", "*"},
	{"nexus", "repository", "*"},
	{"repository", "*"},
	{"artifactory", "*"},
}

// stripLayout returns the rest of a normalized path after a mirror layout's
// prefix (with its leading "/"), or false when no layout matches.
func stripLayout(p string) (string, bool) {
	for _, lay := range mirrorLayouts {
		rest, ok := p, true
		for _, seg := range lay {
			cur, tail, more := strings.Cut(rest[1:], "/")
			if !more || cur == "" || seg != "*" && !strings.EqualFold(cur, seg) {
				ok = false
				break
			}
			rest = "/" + tail
		}
		if ok && rest != "/" {
			return rest, true
		}
	}
	return "", false
}

// registryMeta are registry endpoints that name no package: ping and
// search, audit advisories, index roots, the Go checksum database, the
// crates sparse index configuration, Debian indices.
func registryMeta(p string) bool {
	d := strings.ToLower(decodeAll(p))
	for _, pre := range []string{"/-/ping", "/-/v1/search", "/-/npm/v1/security/", "/sumdb/"} {
		if d == pre || strings.HasPrefix(d, pre) {
			return true
		}
	}
	return d == "/simple" || d == "/simple/" || d == "/api/v1/crates" ||
		strings.HasSuffix(d, "/config.json") || strings.Contains(d, "/dists/")
}

// readPackage is how a registries category reads a normalized path: under
// its path_prefix when it has one (a path outside every prefix is not
// recognized), else under a mirror layout when one matches, else from
// the root. meta is set for a registry endpoint that names no package.
func (c *Category) readPackage(host, p string) (pkg Package, ok, meta bool) {
	if len(c.r.prefixes) > 0 {
		for _, pre := range c.r.prefixes {
			if rest, found := strings.CutPrefix(p, pre); found {
				return readAt(host, "/"+rest)
			}
		}
		return Package{}, false, false
	}
	if rest, found := stripLayout(p); found {
		if pkg, ok, meta = readAt(host, rest); ok || meta {
			return pkg, ok, meta
		}
	}
	return readAt(host, p)
}

func readAt(host, p string) (Package, bool, bool) {
	if pkg, ok := RecognizePackage(host, p); ok {
		return pkg, true, false
	}
	return Package{}, false, registryMeta(p)
}
