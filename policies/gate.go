package policies

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"airlock/internal/tomlpos"
)

// Denial codes a package gate puts at the start of a reason; the report
// and the metadata rewriters quote them.
const (
	CodeTooNew        = "package_too_new"
	CodeNoPublishTime = "no_publish_time"
	CodeInstallScript = "install_script"
	CodeSdist         = "sdist"
)

// PackageGate is a registries category's per-version rules: the release
// age, what to do without a publish time, and npm install scripts. The
// mechanism rewrites metadata with it (versions it denies are hidden)
// and checks downloads with it. Read-only after Load.
type PackageGate struct {
	MinAge       time.Duration // 0: no release-age gate
	ageRule      Rule
	exempt       []pkgPattern
	unknownAllow bool // fail open (a logged warning) when no publish time is known
	unknownRule  Rule
	scripts      Action // ActionAllow, ActionDeny or ActionAsk
	scriptsRule  Rule
	scriptsAllow []pkgPattern
	denySdists   bool // PyPI source distributions refused
	sdistsRule   Rule
	sdistsAllow  []pkgPattern
	mode         Mode
}

// VersionInfo is what a registry's metadata says of one version.
type VersionInfo struct {
	Published     time.Time // zero: the registry gives no publish time
	InstallScript bool      // npm: hasInstallScript or an install-time script
}

// GateVerdict is the gate's answer for one version.
type GateVerdict struct {
	Action    Action // ActionAllow, ActionDeny, ActionAsk or ActionAudit
	WouldDeny bool
	Rule      Rule
	Code      string // CodeTooNew, CodeNoPublishTime, CodeInstallScript; "" when allowed
	Reason    string // starts with Code
	Warning   string // an allow that failed open (no publish time)
}

// Gate returns the category's package gate, nil when it has none.
func (c *Category) Gate() *PackageGate {
	if c == nil {
		return nil
	}
	return c.r.gate
}

// Check decides one version of a package at time now.
func (g *PackageGate) Check(pkg Package, vi VersionInfo, now time.Time) GateVerdict {
	if vi.InstallScript && g.scripts != ActionAllow && !matchAny(g.scriptsAllow, &pkg) {
		why := CodeInstallScript + ": " + pkg.Name + "@" + pkg.Version + " runs an install script (preinstall, install or postinstall)"
		return g.outcome(g.scripts, g.scriptsRule, CodeInstallScript, why)
	}
	if g.MinAge <= 0 || matchAny(g.exempt, &pkg) {
		return GateVerdict{Action: ActionAllow}
	}
	if vi.Published.IsZero() {
		why := CodeNoPublishTime + ": the registry gives no publish time for " + pkg.Name + "@" + pkg.Version
		if g.unknownAllow {
			return GateVerdict{Action: ActionAllow, Rule: g.unknownRule, Warning: why + " (allowed: unknown_release_age = \"allow\")"}
		}
		return g.outcome(ActionDeny, g.unknownRule, CodeNoPublishTime, why)
	}
	age := now.Sub(vi.Published)
	if age >= g.MinAge {
		return GateVerdict{Action: ActionAllow}
	}
	why := fmt.Sprintf("%s: %s@%s was published %s (%s ago); min_release_age is %s", CodeTooNew, pkg.Name, pkg.Version,
		vi.Published.UTC().Format(time.RFC3339), roundAge(age), fmtAge(g.MinAge))
	return g.outcome(ActionDeny, g.ageRule, CodeTooNew, why)
}

func (g *PackageGate) outcome(a Action, r Rule, code, why string) GateVerdict {
	return GateVerdict{Action: a, Rule: r, Code: code, Reason: why}.In(g.mode)
}

// In is the verdict as a category in mode applies it: in audit mode a
// deny or an ask is recorded as would_deny and allowed.
func (gv GateVerdict) In(mode Mode) GateVerdict {
	if mode == ModeAudit && (gv.Action == ActionDeny || gv.Action == ActionAsk) {
		gv.Action, gv.WouldDeny = ActionAudit, true
	}
	return gv
}

func matchAny(list []pkgPattern, pkg *Package) bool {
	for i := range list {
		if list[i].match(pkg) {
			return true
		}
	}
	return false
}

func roundAge(d time.Duration) string {
	if d < 0 {
		return "in the future: " + fmtAge(-d.Round(time.Minute))
	}
	return fmtAge(d.Round(time.Minute))
}

// fmtAge prints whole days as "3d", else a Go duration.
func fmtAge(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// parseAge reads "72h", "90m", "3d" or "1d12h".
func parseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var days int64
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.ParseInt(s[:i], 10, 32)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bad day count %q", s[:i])
		}
		days, s = n, s[i+1:]
	}
	var rest time.Duration
	if s != "" {
		var err error
		if rest, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("want a duration such as \"72h\" or \"3d\": %w", err)
		}
		if rest < 0 {
			return 0, fmt.Errorf("out of range (0 to 3650d)")
		}
	}
	d := time.Duration(days)*24*time.Hour + rest
	if d < 0 || d > 3650*24*time.Hour {
		return 0, fmt.Errorf("out of range (0 to 3650d)")
	}
	return d, nil
}

func (l *loader) gateKeys(c *Category, w *wireCategory) {
	path := c.r.path
	if !w.gatePresent() {
		return
	}
	g := &PackageGate{mode: c.Mode, scripts: ActionAllow}
	if w.MinReleaseAge != nil {
		s := *w.MinReleaseAge
		d, err := parseAge(s)
		if err != nil {
			l.errf(tomlpos.Join(path, "min_release_age"), "%q: %v", s, err)
		}
		g.MinAge = d
	}
	g.ageRule = l.rule(tomlpos.Join(path, "min_release_age"))
	g.exempt = l.pkgList(&w.ReleaseAgeExempt)
	g.unknownRule = l.rule(tomlpos.Join(path, "unknown_release_age"))
	if w.UnknownReleaseAge != nil {
		switch s := *w.UnknownReleaseAge; s {
		case "allow":
			g.unknownAllow = true
		case "deny":
		default:
			l.errf(tomlpos.Join(path, "unknown_release_age"), "%q: want \"allow\" (fail open, with a warning) or \"deny\" (fail closed, the default)", s)
		}
	}
	g.scriptsRule = l.rule(tomlpos.Join(path, "install_scripts"))
	if w.InstallScripts != nil {
		switch s := *w.InstallScripts; s {
		case "allow":
		case "deny":
			g.scripts = ActionDeny
		case "ask":
			g.scripts = ActionAsk
		default:
			l.errf(tomlpos.Join(path, "install_scripts"), "%q: want \"allow\", \"deny\" or \"ask\"", s)
		}
	}
	g.scriptsAllow = l.pkgList(&w.InstallScriptsAllow)
	g.sdistsRule = l.rule(tomlpos.Join(path, "sdists"))
	if w.Sdists != nil {
		switch s := *w.Sdists; s {
		case "allow":
		case "deny":
			g.denySdists = true
		default:
			l.errf(tomlpos.Join(path, "sdists"), "%q: want \"allow\" (the default) or \"deny\"", s)
		}
	}
	g.sdistsAllow = l.pkgList(&w.SdistsAllow)
	c.r.gate = g
}

// pkgList reads a list of ECOSYSTEM:NAME[constraint] patterns.
func (l *loader) pkgList(w *strs) []pkgPattern {
	list, paths := w.vals, w.paths
	var out []pkgPattern
	for i, s := range list {
		pp, err := parsePkgPattern(s)
		if err != nil {
			l.errf(paths[i], "%q: %v", s, err)
			continue
		}
		pp.rule = l.rule(paths[i])
		out = append(out, pp)
	}
	return out
}

// gateNotes are what Explain says of the package gate on an allowed
// registries request: which versions the proxy hides from the metadata
// (or, for a download, when it refuses the version) and by which rule.
func gateNotes(v Verdict) []Consideration {
	pkg := v.Package
	if v.Cat == nil || !v.Action.Allows() || pkg.Ecosystem == "" {
		return nil
	}
	var out []Consideration
	if lk := v.Cat.Lock(); lk.Locks(pkg.Ecosystem) {
		if pkg.Version == "" {
			out = append(out, Consideration{Rule: lk.rule, Outcome: "the proxy hides from this metadata the versions the lockfiles do not list (" + CodeNotInLockfile + ")"})
		} else if d := lk.Digests(pkg); len(d) > 0 {
			out = append(out, Consideration{Rule: lk.rule, Outcome: "the artifact must match the lockfiles' digest " + d[0] + " (integrity_mismatch)"})
		}
	}
	g := v.Cat.Gate()
	if g == nil {
		return out
	}
	what := "hides from this metadata"
	if pkg.Version != "" {
		what = "refuses this download of"
	}
	if g.MinAge > 0 && (pkg.Ecosystem == "npm" || pkg.Ecosystem == "pypi") {
		if pp := firstMatch(g.exempt, &pkg); pp != nil {
			out = append(out, Consideration{Rule: pp.rule, Outcome: pkg.Name + " is exempt from min_release_age"})
		} else {
			out = append(out, Consideration{Rule: g.ageRule, Outcome: "the proxy " + what + " versions published less than " +
				fmtAge(g.MinAge) + " ago (" + CodeTooNew + ")"})
			unknown := "hidden (" + CodeNoPublishTime + ", fail closed)"
			if g.unknownAllow {
				unknown = "allowed with a warning (fail open)"
			}
			out = append(out, Consideration{Rule: g.unknownRule, Outcome: "versions without a publish time are " + unknown})
		}
	}
	if g.scripts != ActionAllow && pkg.Ecosystem == "npm" {
		if pp := firstMatch(g.scriptsAllow, &pkg); pp != nil {
			out = append(out, Consideration{Rule: pp.rule, Outcome: pkg.Name + "'s install scripts are allowed"})
		} else {
			how := "hidden and denied"
			if g.scripts == ActionAsk {
				how = "listed, their downloads held for approval"
			}
			out = append(out, Consideration{Rule: g.scriptsRule, Outcome: "versions with install scripts are " + how + " (" + CodeInstallScript + ")"})
		}
	}
	return out
}

func firstMatch(list []pkgPattern, pkg *Package) *pkgPattern {
	for i := range list {
		if list[i].match(pkg) {
			return &list[i]
		}
	}
	return nil
}

// IsSdist reports whether a PyPI file name is a source distribution
// (built, and its code run, on install): .tar.gz, .tar.bz2, .tgz, .zip.
func IsSdist(filename string) bool {
	for _, ext := range []string{".tar.gz", ".tar.bz2", ".tgz", ".zip"} {
		if strings.HasSuffix(strings.ToLower(filename), ext) {
			return true
		}
	}
	return false
}

// DeniesSdists reports whether the gate refuses pkg's source
// distributions (sdists = "deny" and pkg not in sdists_allow).
func (g *PackageGate) DeniesSdists(pkg Package) bool {
	return g != nil && g.denySdists && pkg.Ecosystem == "pypi" && !matchAny(g.sdistsAllow, &pkg)
}

// SdistsRule is the rule that refuses source distributions.
func (g *PackageGate) SdistsRule() Rule { return g.sdistsRule }

// sdistDeny is the verdict on a PyPI download of a source distribution
// the category refuses, nil when it does not.
func (c *Category) sdistDeny(pkg Package, p string) *Verdict {
	g := c.r.gate
	if pkg.Version == "" || !g.DeniesSdists(pkg) || !IsSdist(p) {
		return nil
	}
	v := catVerdict(c, ActionDeny, g.sdistsRule, CodeSdist+": "+pkg.Name+"@"+pkg.Version+" is a source distribution, built on install; "+
		c.r.path+".sdists refuses them (list the package in sdists_allow, or use a wheel)")
	v.Package = pkg
	return &v
}
