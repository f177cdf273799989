package policies

import (
	"strings"
	"testing"
	"time"
)

func gateOf(t *testing.T, keys string) *PackageGate {
	t.Helper()
	p, err := Parse("g.toml", []byte("version = 1\n[categories.registries]\nhosts = [\"registry.example.test\"]\n"+keys))
	if err != nil {
		t.Fatal(err)
	}
	return p.Categories()[0].Gate()
}

func TestGateCheck(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	g := gateOf(t, `min_release_age = "3d"
release_age_exempt = ["npm:@acme/*", "pypi:Internal_Tool"]
install_scripts = "deny"
install_scripts_allow = ["npm:esbuild>=0.20"]
`)
	fresh, mature := now.Add(-2*time.Hour), now.Add(-4*24*time.Hour)
	cases := []struct {
		name string
		pkg  Package
		vi   VersionInfo
		want Action
		code string
		rule string
	}{
		{"mature", Package{"npm", "left-pad", "1.0.0"}, VersionInfo{Published: mature}, ActionAllow, "", ""},
		{"fresh", Package{"npm", "left-pad", "2.0.0"}, VersionInfo{Published: fresh}, ActionDeny, CodeTooNew, "categories.registries.min_release_age"},
		{"exactly the age", Package{"npm", "left-pad", "2.0.0"}, VersionInfo{Published: now.Add(-72 * time.Hour)}, ActionAllow, "", ""},
		{"published in the future", Package{"npm", "left-pad", "2.0.0"}, VersionInfo{Published: now.Add(time.Hour)}, ActionDeny, CodeTooNew, ""},
		{"exempt scope", Package{"npm", "@acme/ui", "9.0.0"}, VersionInfo{Published: fresh}, ActionAllow, "", ""},
		{"exempt pypi name normalized", Package{"pypi", "internal-tool", "1"}, VersionInfo{Published: fresh}, ActionAllow, "", ""},
		{"no time fails closed", Package{"npm", "left-pad", "3.0.0"}, VersionInfo{}, ActionDeny, CodeNoPublishTime, "categories.registries.unknown_release_age"},
		{"install script", Package{"npm", "left-pad", "1.0.0"}, VersionInfo{Published: mature, InstallScript: true}, ActionDeny, CodeInstallScript, "categories.registries.install_scripts"},
		{"install script allowed by version", Package{"npm", "esbuild", "0.21.0"}, VersionInfo{Published: mature, InstallScript: true}, ActionAllow, "", ""},
		{"install script below the allowed version", Package{"npm", "esbuild", "0.19.0"}, VersionInfo{Published: mature, InstallScript: true}, ActionDeny, CodeInstallScript, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gv := g.Check(c.pkg, c.vi, now)
			if gv.Action != c.want || gv.Code != c.code || !strings.HasPrefix(gv.Reason, c.code) || c.rule != "" && gv.Rule.Name != c.rule {
				t.Errorf("got %+v", gv)
			}
		})
	}
	gv := g.Check(Package{"npm", "left-pad", "2.0.0"}, VersionInfo{Published: fresh}, now)
	if want := "package_too_new: left-pad@2.0.0 was published 2026-12-01T10:00:00Z (2h0m0s ago); min_release_age is 3d"; gv.Reason != want {
		t.Errorf("reason %q\nwant   %q", gv.Reason, want)
	}
	if gv.Rule.Pos.Line != 4 {
		t.Errorf("rule position %v", gv.Rule.Pos)
	}
}

func TestGateModes(t *testing.T) {
	now := time.Now()
	open := gateOf(t, "min_release_age = \"72h\"\nunknown_release_age = \"allow\"\n")
	if gv := open.Check(Package{"npm", "x", "1"}, VersionInfo{}, now); gv.Action != ActionAllow || !strings.HasPrefix(gv.Warning, CodeNoPublishTime) {
		t.Errorf("fail open: %+v", gv)
	}
	audit := gateOf(t, "mode = \"audit\"\nmin_release_age = \"72h\"\n")
	if gv := audit.Check(Package{"npm", "x", "1"}, VersionInfo{Published: now}, now); gv.Action != ActionAudit || !gv.WouldDeny || gv.Code != CodeTooNew {
		t.Errorf("audit: %+v", gv)
	}
	ask := gateOf(t, "install_scripts = \"ask\"\n")
	if gv := ask.Check(Package{"npm", "x", "1"}, VersionInfo{InstallScript: true}, now); gv.Action != ActionAsk {
		t.Errorf("ask: %+v", gv)
	}
	if gv := ask.Check(Package{"npm", "x", "1"}, VersionInfo{}, now); gv.Action != ActionAllow {
		t.Errorf("no age gate, no script: %+v", gv)
	}
	if g := gateOf(t, ""); g != nil {
		t.Errorf("a category without gate keys has a gate: %+v", g)
	}
}

func TestGateErrors(t *testing.T) {
	cases := []struct{ keys, want string }{
		{`min_release_age = "soon"`, `g.toml:4:1: categories.registries.min_release_age: "soon": want a duration such as "72h" or "3d"`},
		{`min_release_age = "-1h"`, `categories.registries.min_release_age: "-1h": out of range`},
		{`min_release_age = 72`, `categories.registries.min_release_age: want a string, got an integer`},
		{`unknown_release_age = "maybe"`, `categories.registries.unknown_release_age: "maybe": want "allow"`},
		{`install_scripts = "never"`, `categories.registries.install_scripts: "never": want "allow", "deny" or "ask"`},
		{`release_age_exempt = ["left-pad"]`, `categories.registries.release_age_exempt[0]: "left-pad": want ECOSYSTEM:NAME`},
		{`install_scripts_allow = ["npm:"]`, `categories.registries.install_scripts_allow[0]: "npm:": empty package name`},
	}
	for _, c := range cases {
		_, err := Parse("g.toml", []byte("version = 1\n[categories.registries]\nhosts = [\"registry.example.test\"]\n"+c.keys+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v\nwant %s", c.keys, err, c.want)
		}
	}
	_, err := Parse("g.toml", []byte("version = 1\n[categories.git]\nhosts = [\"git.example.test\"]\nmin_release_age = \"1d\"\n"))
	if err == nil || !strings.Contains(err.Error(), "min_release_age only applies to registries categories") {
		t.Errorf("gate key on git: %v", err)
	}
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"72h": 72 * time.Hour, "3d": 72 * time.Hour, "1d12h": 36 * time.Hour, "90m": 90 * time.Minute, "0": 0} {
		if got, err := parseAge(in); err != nil || got != want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "3x", "1d-1h", "99999d", "1.5d"} {
		if d, err := parseAge(in); err == nil && in != "" {
			t.Errorf("parseAge(%q) = %v, want an error", in, d)
		}
	}
}

// TestExplainGate: explain says what the package gate does to a
// registries request, and by which rule.
func TestExplainGate(t *testing.T) {
	p, err := Parse("g.toml", []byte(`version = 1
[categories.registries]
hosts = ["registry.example.test"]
min_release_age = "72h"
release_age_exempt = ["npm:@acme/*"]
install_scripts = "ask"
`))
	if err != nil {
		t.Fatal(err)
	}
	outcomes := func(path string) string {
		ex := p.Explain(Request{Stage: StageHTTP, Method: "GET", Scheme: "https", Host: "registry.example.test", Port: 443, Path: path})
		var s []string
		for _, c := range ex.Considered {
			s = append(s, c.Rule.String()+": "+c.Outcome)
		}
		return strings.Join(s, "\n")
	}
	got := outcomes("/left-pad")
	for _, want := range []string{
		"categories.registries.min_release_age (g.toml:4:1): the proxy hides from this metadata versions published less than 3d ago (package_too_new)",
		"categories.registries.unknown_release_age (g.toml:2:1): versions without a publish time are hidden (no_publish_time, fail closed)",
		"categories.registries.install_scripts (g.toml:6:1): versions with install scripts are listed, their downloads held for approval (install_script)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("explain lacks %q:\n%s", want, got)
		}
	}
	if got := outcomes("/left-pad/-/left-pad-2.0.0.tgz"); !strings.Contains(got, "refuses this download of versions published less than 3d ago") {
		t.Errorf("download:\n%s", got)
	}
	if got := outcomes("/@acme/ui"); !strings.Contains(got, "release_age_exempt[0] (g.toml:5:23): @acme/ui is exempt from min_release_age") {
		t.Errorf("exempt:\n%s", got)
	}
}

func TestSdists(t *testing.T) {
	p, err := Parse("g.toml", []byte(`version = 1
[categories.registries]
hosts = ["pypi.pkg.example.test"]
sdists = "deny"
sdists_allow = ["pypi:Legacy_Tool"]
`))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]Action{
		"/packages/aa/demo-1.0.tar.gz":                    ActionDeny,
		"/packages/aa/demo-1.0.zip":                       ActionDeny,
		"/packages/aa/demo-1.0-py3-none-any.whl":          ActionAllow,
		"/packages/aa/legacy-tool-2.0.tar.gz":             ActionAllow,
		"/simple/demo/":                                   ActionAllow,
		"/packages/aa/demo-1.0-py3-none-any.whl.metadata": ActionAllow,
	} {
		v := p.Decide(Request{Stage: StageHTTP, Method: "GET", Scheme: "https", Host: "pypi.pkg.example.test", Port: 443, Path: path})
		if v.Action != want || want == ActionDeny && (v.Rule.Name != "categories.registries.sdists" || !strings.HasPrefix(v.Reason, "sdist: demo@1.0 is a source distribution")) {
			t.Errorf("%s: %v by %s: %q", path, v.Action, v.Rule, v.Reason)
		}
	}
	if _, err := Parse("g.toml", []byte("version = 1\n[categories.registries]\nhosts = [\"r.example.test\"]\nsdists = \"never\"\n")); err == nil || !strings.Contains(err.Error(), `categories.registries.sdists: "never": want "allow"`) {
		t.Errorf("bad sdists: %v", err)
	}
}
