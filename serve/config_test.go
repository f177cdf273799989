package serve

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const minimal = `version = 1
[network]
pool = "198.18.64.0/24"
gateway = "198.18.64.1"
[upstream]
resolvers = ["198.18.0.53"]
`

func TestLoadExample(t *testing.T) {
	c, err := Load(filepath.Join("examples", "lab.toml"))
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	if got, want := c.Network.Pool, netip.MustParsePrefix("198.18.64.0/24"); got != want {
		t.Errorf("pool = %v, want %v", got, want)
	}
	if !c.Upstream.AllowsUpstream(netip.MustParseAddr("198.18.0.10")) {
		t.Error("lab range not allowed upstream")
	}
	if c.Upstream.AllowsUpstream(netip.MustParseAddr("198.18.1.10")) {
		t.Error("address outside the lab range allowed upstream")
	}
	if c.Sandbox.ExecTimeout.Duration != 10*time.Minute || c.Approval.Timeout.Duration != 2*time.Minute {
		t.Errorf("durations = %v, %v", c.Sandbox.ExecTimeout, c.Approval.Timeout)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse("min.toml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != DefaultStateDir || c.Control.Socket != DefaultSocket || c.Listen.DNS != 53 ||
		c.Listen.ProxyTransparent != DefaultProxyPort || c.Podman.User != DefaultPodmanUser {
		t.Errorf("defaults not applied: %+v", c)
	}
	if got := c.Upstream.Resolvers[0].AddrPort; got != netip.MustParseAddrPort("198.18.0.53:53") {
		t.Errorf("resolver without port = %v, want port 53", got)
	}
	if c.Audit.Store != "/var/lib/airlock/audit.db" {
		t.Errorf("audit store = %q", c.Audit.Store)
	}
}

// TestSandboxMaxFile: sandbox.max_file_mb bounds the agent's files API
// (runner.Config.MaxFileBytes); unset, the runner's default applies.
func TestSandboxMaxFile(t *testing.T) {
	c, err := Parse("c.toml", []byte(minimal+"[sandbox]\nmax_file_mb = 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.runnerMaxFile(); got != 3<<20 {
		t.Errorf("max_file_mb = 3 gives the runner %d bytes, want %d", got, 3<<20)
	}
	c, err = Parse("c.toml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.runnerMaxFile(); got != 0 {
		t.Errorf("no max_file_mb gives the runner %d, want 0 (its default)", got)
	}
}

func TestLoadMissingIsDistinct(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"))
	if !errors.Is(err, ErrNoConfig) {
		t.Fatalf("missing file: %v, want ErrNoConfig", err)
	}
}

func TestInvalid(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // each a substring of one error, in order
	}{
		{"no version", strings.Replace(minimal, "version = 1\n", "", 1),
			[]string{"c.toml: version is required"}},
		{"version 2", strings.Replace(minimal, "version = 1", "version = 2", 1),
			[]string{"c.toml:1:1: unsupported version 2"}},
		{"unknown top key", "stat_dir = \"/x\"\n" + minimal,
			[]string{`c.toml:1:1: unknown key "stat_dir"`}},
		{"unknown nested key", minimal + "[control]\nsockett = \"/x\"\n",
			[]string{`c.toml:8:1: unknown key "control.sockett"`}},
		{"unknown key in an inline table", "control = { socket = \"/x\", sockett = \"/y\" }\n" + minimal,
			[]string{`c.toml:1:28: unknown key "control.sockett"`}},
		{"unknown table", minimal + "[proxy]\nport = 1\n",
			[]string{`c.toml:7:1: unknown key "proxy"`, `c.toml:8:1: unknown key "proxy.port"`}},
		{"bad prefix", strings.Replace(minimal, "198.18.64.0/24", "198.18.64.0/33", 1),
			[]string{"c.toml:3:9: network.pool: netip.ParsePrefix"}},
		{"host bits", strings.Replace(minimal, "198.18.64.0/24", "198.18.64.7/24", 1),
			[]string{"c.toml:3:1: network.pool 198.18.64.7/24 has host bits set; did you mean 198.18.64.0/24?"}},
		{"ipv6 pool", strings.Replace(minimal, `"198.18.64.0/24"`, `"fd00::/64"`, 1),
			[]string{"c.toml:3:1: network.pool must be IPv4"}},
		{"gateway is broadcast", strings.Replace(minimal, `gateway = "198.18.64.1"`, `gateway = "198.18.64.255"`, 1),
			[]string{"c.toml:4:1: network.gateway 198.18.64.255 is the pool's network or broadcast"}},
		{"no resolvers", strings.Replace(minimal, `resolvers = ["198.18.0.53"]`, `resolvers = []`, 1),
			[]string{"c.toml:6:1: upstream.resolvers is required"}},
		{"duplicate ports", minimal + "[listen]\nproxy_explicit_port = 53\n",
			[]string{"c.toml: port 53 is already used by listen.proxy_explicit_port"}},
		{"metrics not loopback", minimal + "[metrics]\nlisten = \"198.18.64.1:9464\"\n",
			[]string{"c.toml:8:1: metrics must listen on a loopback address"}},
		{"tcp without token", minimal + "[control]\ntcp = \"127.0.0.1:7443\"\n",
			[]string{"c.toml:8:1: control.tcp needs control.token_file"}},
		{"relative path", "state_dir = \"var/x\"\n" + minimal,
			[]string{`c.toml:1:1: state_dir must be an absolute path, not "var/x"`}},
		{"bad duration", minimal + "[sandbox]\nexec_timeout = \"10 minutes\"\n",
			[]string{"c.toml:8:17: sandbox.exec_timeout: not a duration"}},
		{"wrong type", minimal + "[sandbox]\nmax = \"ten\"\n",
			[]string{"c.toml:8:1: sandbox.max: incompatible types: TOML value has type string"}},
		{"syntax", minimal + "[network\n",
			[]string{"c.toml:8:"}},
		{"allow everything", minimal + "allow = [\"0.0.0.0/0\"]\n",
			[]string{"c.toml:7:1: upstream.allow[0]: 0.0.0.0/0 allows every address"}},
		{"too many sandboxes", minimal + "[sandbox]\nmax = 1000\n",
			[]string{"c.toml:8:1: sandbox.max 1000 does not fit the pool"}},
		{"relative osv dir", minimal + "[packages]\nosv = [\"advisories\"]\n",
			[]string{`c.toml:8:1: packages.osv[0]: must be an absolute path, not "advisories"`}},
		{"unknown packages key", minimal + "[packages]\nosvs = [\"/x\"]\n",
			[]string{`c.toml:8:1: unknown key "packages.osvs"`}},
		{"negative file bound", minimal + "[sandbox]\nmax_file_mb = -2\n",
			[]string{"c.toml:8:1: sandbox.max_file_mb must be between 0 (the default) and 1073741824, not -2"}},
		{"negative artifact bound", minimal + "[artifacts]\nmax_file_mb = -1\nmax_age = \"2d\"\n",
			[]string{"c.toml:8:1: artifacts.max_file_mb must be between 0 (the default) and 1073741824, not -1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("c.toml", []byte(tt.src))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("err = %v, want Errors", err)
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i].Error(), w)
				}
			}
		})
	}
}

func TestAllErrorsAtOnce(t *testing.T) {
	src := "version = 3\nbogus = 1\n[network]\npool = \"198.18.64.1/24\"\n"
	_, err := Parse("c.toml", []byte(src))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) < 4 {
		t.Fatalf("want ≥4 errors (unknown key, version, pool, gateway, resolvers), got %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte("version = 1\n[network]\npool = \"x\"\n"))
	f.Add([]byte("[[a]]\nb.c = 1\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := Parse("f.toml", src)
		if err == nil && c.Version != 1 {
			t.Fatalf("accepted config with version %d", c.Version)
		}
	})
}

// TestEveryErrorAtOnce: the review's config (users.md S12) took three runs
// of --check, one error each; all three are reported in one, the unknown
// key with the name it was meant to be.
func TestEveryErrorAtOnce(t *testing.T) {
	src := minimal + `[audit]
retension = "7d"
[sandbox]
exec_timeout = "10 minutes"
lifetime = "forever"
[control]
sokcet = "/run/x.sock"
`
	_, err := Parse("c.toml", []byte(src))
	want := `c.toml:8:1: unknown key "audit.retension" (did you mean "audit.retention"?)
c.toml:10:17: sandbox.exec_timeout: not a duration (use e.g. "30s", "5m", "1h", "7d"): "10 minutes"
c.toml:11:13: sandbox.lifetime: not a duration (use e.g. "30s", "5m", "1h", "7d"): "forever"
c.toml:13:1: unknown key "control.sokcet" (did you mean "control.socket"?)`
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}

// TestDurationUnits: durations take whole days too, as logs --since does
// (users.md S12: "7d" was refused in audit.retention).
func TestDurationUnits(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "10m": 10 * time.Minute, "4h": 4 * time.Hour,
		"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "0d": 0,
	} {
		var d Duration
		if err := d.UnmarshalText([]byte(in)); err != nil || d.Duration != want {
			t.Errorf("%q = %v, %v; want %v", in, d.Duration, err, want)
		}
	}
	for _, in := range []string{"", "d", "7", "-1d", "+1d", "1d-1h", "1.5d", "10 minutes", "7dd", "999999999d", "100000d2562047h"} {
		var d Duration
		if err := d.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("%q accepted as %v", in, d.Duration)
		}
	}
	c, err := Parse("c.toml", []byte(minimal+"[audit]\nretention = \"7d\"\n"))
	if err != nil || c.Audit.Retention.Duration != 7*24*time.Hour {
		t.Errorf("retention = \"7d\": %v, %v", c, err)
	}
}

// TestExampleImagesExist: the default image and every image an example
// config names is one runner/images/build.sh builds (users.md S12: lab.toml
// named localhost/airlock-busybox:latest, which nothing builds).
func TestExampleImagesExist(t *testing.T) {
	script, err := os.ReadFile("../runner/images/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	built := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^[A-Z_]+_TAG=(\S+)$`).FindAllStringSubmatch(string(script), -1) {
		built[m[1]] = true
	}
	if len(built) < 2 {
		t.Fatalf("found %d image tags in build.sh", len(built))
	}
	if !built[DefaultImage] {
		t.Errorf("DefaultImage %q is not built by runner/images/build.sh (%v)", DefaultImage, built)
	}
	files, _ := filepath.Glob("examples/*.toml")
	if len(files) == 0 {
		t.Fatal("no example configs")
	}
	for _, f := range files {
		c, err := Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !built[c.Sandbox.Image] {
			t.Errorf("%s: sandbox.image %q is not built by runner/images/build.sh (%v)", f, c.Sandbox.Image, built)
		}
	}
}

// FuzzDuration: any text either fails or gives a non-negative duration
// that round-trips through its Go form.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"90s", "7d", "1d12h", "d", "-1d", "99999d23h59m", "1.5h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d Duration
		if d.UnmarshalText([]byte(s)) != nil {
			return
		}
		if d.Duration < 0 {
			t.Fatalf("%q = %v", s, d.Duration)
		}
		var back Duration
		if err := back.UnmarshalText([]byte(d.String())); err != nil || back != d {
			t.Fatalf("%q = %v, which reads back as %v, %v", s, d.Duration, back.Duration, err)
		}
	})
}
