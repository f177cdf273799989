package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/ulikunitz/xz"

	"airlock/audit"
	"airlock/policies"
)

const debPoolFile = "pool/main/g/gate-deb/gate-deb_1.0-1_amd64.deb"

// debIndexText is a Packages index listing each Filename with the SHA256
// of its bytes.
func debIndexText(debs map[string][]byte) string {
	var b strings.Builder
	for _, f := range slices.Sorted(maps.Keys(debs)) {
		sum := sha256.Sum256(debs[f])
		fmt.Fprintf(&b, "Package: %s\nVersion: 1.0-1\nFilename: %s\nSize: %d\nSHA256: %s\n\n", f, f, len(debs[f]), hex.EncodeToString(sum[:]))
	}
	return b.String()
}

func xzBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w, err := xz.NewWriter(&out)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func sri(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// debMirror serves bodies by "host path".
type debMirror map[string]http.HandlerFunc

func (m debMirror) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	host, _, _ := net.SplitHostPort(r.Host)
	if h := m[host+" "+r.URL.Path]; h != nil {
		h(rw, r)
		return
	}
	http.NotFound(rw, r)
}

func serveBytes(b []byte) http.HandlerFunc {
	return func(rw http.ResponseWriter, _ *http.Request) { rw.Write(b) }
}

// debPackage is the package of the nth finished http event for host and
// path, in the order the requests began.
func (g *gateEnv) debPackage(t *testing.T, host, path string, n int) *audit.Package {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var match []audit.Event
		for _, e := range g.ev.all() {
			if e.Kind == audit.KindHTTP && e.HTTP != nil && e.HTTP.Host == host && e.HTTP.Path == path && e.HTTP.Status != 0 {
				match = append(match, e)
			}
		}
		if len(match) >= n {
			slices.SortStableFunc(match, func(a, b audit.Event) int { return a.Time.Compare(b.Time) })
			if pk := match[n-1].HTTP.Package; pk != nil {
				return pk
			}
			return &audit.Package{}
		}
	}
	t.Fatalf("no http event %d for %s%s; events:\n%s", n, host, path, g.ev.dump())
	return nil
}

// TestPackageGateDebianRepos: digests are remembered per repository.
// Two mirrors in one category list the same Filename with different
// digests: another archive root on the same host (where users publish)
// and another host with the same root. Each .deb is checked against its
// own repository's index, whatever order the indices came in; the
// genuine one is cached and served from there.
func TestPackageGateDebianRepos(t *testing.T) {
	genuine, evil := debBytes("gate-deb"), debBytes("evil")
	const plain, other = "plain.example.test", "locked.example.test"
	m := debMirror{}
	repos := []struct {
		host, root string
		deb        []byte
	}{{plain, "/mirror", genuine}, {plain, "/users/evil", evil}, {other, "/mirror", debBytes("other")}}
	for _, r := range repos {
		m[r.host+" "+r.root+"/dists/stable/main/binary-amd64/Packages.xz"] = serveBytes(xzBytes(t, []byte(debIndexText(map[string][]byte{debPoolFile: r.deb}))))
		m[r.host+" "+r.root+"/"+debPoolFile] = serveBytes(r.deb)
	}
	var twoHosts atomic.Value // the policy, made once the registry's port is known
	g := newGateEnvWith(t, gateOpts{extra: map[string]http.Handler{"/mirror/": m, "/users/": m}, cache: openTestCache(t, t.TempDir(), 64<<20),
		policy: func(Decider) Decider { return twoHosts.Load().(Decider) }})
	pol := strings.Replace(gatePolicy, `hosts = ["plain.example.test"]`, `hosts = ["plain.example.test", "locked.example.test"]`, 1)
	parsed, err := policies.Parse("gate.toml", []byte(strings.ReplaceAll(pol, "REGPORT", fmt.Sprint(g.regPort))))
	if err != nil {
		t.Fatal(err)
	}
	twoHosts.Store(Decider(policies.Bind(parsed, worldOperator)))

	for _, r := range repos {
		if resp, _ := g.get(t, g.regURL(r.host, r.root+"/dists/stable/main/binary-amd64/Packages.xz"), ""); resp.StatusCode != 200 {
			t.Fatalf("%s%s index: %d", r.host, r.root, resp.StatusCode)
		}
	}
	for i, r := range append(repos, repos[0]) {
		resp, body := g.get(t, g.regURL(r.host, r.root+"/"+debPoolFile), "")
		want := cacheMiss
		if i == len(repos) {
			want = cacheHit
		}
		pk := g.debPackage(t, r.host, r.root+"/"+debPoolFile, 1+i/len(repos))
		if resp.StatusCode != 200 || body != string(r.deb) || pk.Integrity != sri(r.deb) || pk.Cache != want {
			t.Errorf("%s%s .deb: %d, whole %v, integrity %q (want %q), cache %q (want %s)", r.host, r.root, resp.StatusCode, body == string(r.deb), pk.Integrity, sri(r.deb), pk.Cache, want)
		}
	}
}

// setXZDict sets the dictionary code of the first block header of a
// document the xz package wrote, and fixes the header's CRC32.
func setXZDict(t *testing.T, doc []byte, code byte) []byte {
	t.Helper()
	out := bytes.Clone(doc)
	n := (int(out[12]) + 1) * 4
	if out[14] != 0x21 || out[15] != 1 {
		t.Fatalf("no LZMA2 filter: % x", out[12:12+n])
	}
	out[16] = code
	binary.LittleEndian.PutUint32(out[12+n-4:], crc32.ChecksumIEEE(out[12:12+n-4]))
	return out
}

// TestPackageGateDebianHostileIndex: an index cut short, corrupt, with a
// line over the bound, asking for a 4 GiB xz dictionary or listing more
// .debs than are remembered adds no digest: the .deb it lists stays
// unknown (passes unchecked and uncached, as before any index), and the
// proxy is not hurt. A whole index in the same world is remembered.
func TestPackageGateDebianHostileIndex(t *testing.T) {
	genuine := debBytes("gate-deb")
	one := []byte(debIndexText(map[string][]byte{debPoolFile: genuine}))
	two := []byte(debIndexText(map[string][]byte{debPoolFile: genuine, "pool/main/o/other/other_1_all.deb": []byte("x")}))
	xzOne := xzBytes(t, one)
	cases := map[string]http.HandlerFunc{
		"whole": serveBytes(xzOne),
		"cut": func(rw http.ResponseWriter, _ *http.Request) {
			rw.Header().Set("Content-Length", fmt.Sprint(len(xzOne)))
			rw.Write(xzOne[:len(xzOne)-20])
		},
		"cut-plain": func(rw http.ResponseWriter, _ *http.Request) { // whole stanzas: only the transport knows
			rw.Header().Set("Content-Length", fmt.Sprint(len(one)+100))
			rw.Write(one)
		},
		"corrupt":       serveBytes(append(xzOne[:len(xzOne)/2:len(xzOne)/2], append([]byte{xzOne[len(xzOne)/2] ^ 0x55}, xzOne[len(xzOne)/2+1:]...)...)),
		"long-line":     serveBytes(append([]byte("Package: x\nDescription: "+strings.Repeat("x", 2<<20)+"\n\n"), one...)),
		"xz-dictionary": serveBytes(setXZDict(t, xzOne, 40)),
		"over-the-cap":  serveBytes(xzBytes(t, two)),
	}
	m := debMirror{}
	for name, h := range cases {
		m["plain.example.test /bad/"+name+"/dists/stable/main/binary-amd64/Packages"] = h
		m["plain.example.test /bad/"+name+"/"+debPoolFile] = serveBytes(genuine)
	}
	pc := openTestCache(t, t.TempDir(), 64<<20)
	pc.debs.max = 1 // "over-the-cap" lists two
	g := newGateEnvWith(t, gateOpts{extra: map[string]http.Handler{"/bad/": m}, cache: pc})
	for name := range cases {
		g.get(t, g.regURL("plain.example.test", "/bad/"+name+"/dists/stable/main/binary-amd64/Packages"), "")
		path := "/bad/" + name + "/" + debPoolFile
		resp, body := g.get(t, g.regURL("plain.example.test", path), "")
		pk := g.debPackage(t, "plain.example.test", path, 1)
		want := audit.Package{}
		if name == "whole" {
			want = audit.Package{Integrity: sri(genuine), Cache: cacheMiss}
		}
		if resp.StatusCode != 200 || body != string(genuine) || pk.Integrity != want.Integrity || pk.Cache != want.Cache {
			t.Errorf("%s: .deb %d, whole %v, integrity %q cache %q; want integrity %q cache %q", name, resp.StatusCode, body == string(genuine), pk.Integrity, pk.Cache, want.Integrity, want.Cache)
		}
	}
}

// TestDebIndexTee: the tee passes the body on unchanged; the digests are
// in when the reader has the body's end, and only when the body ended
// whole and parsed; an index over the cap is refused with a warning.
func TestDebIndexTee(t *testing.T) {
	genuine := debBytes("gate-deb")
	one := xzBytes(t, []byte(debIndexText(map[string][]byte{debPoolFile: genuine})))
	two := xzBytes(t, []byte(debIndexText(map[string][]byte{debPoolFile: genuine, "pool/o/o_1_all.deb": nil})))
	upErr := errors.New("connection reset")
	for name, tc := range map[string]struct {
		body   io.Reader
		max    int
		read   int // bytes read before Close; -1: to the end
		want   string
		logged string
	}{
		"whole":                              {bytes.NewReader(one), 0, -1, sri(genuine), ""},
		"a byte a time":                      {iotest.OneByteReader(bytes.NewReader(one)), 0, -1, sri(genuine), ""},
		"closed early":                       {bytes.NewReader(one), 0, len(one) / 2, "", ""},
		"upstream error":                     {io.MultiReader(bytes.NewReader(one[:len(one)/2]), iotest.ErrReader(upErr)), 0, -1, "", ""},
		"upstream error after whole stanzas": {io.MultiReader(strings.NewReader(debIndexText(map[string][]byte{debPoolFile: genuine})), iotest.ErrReader(upErr)), 0, -1, "", ""},
		"over the cap": {bytes.NewReader(two), 1, -1, "",
			`level=WARN msg="proxy: package gate: Packages index refused: its .debs stay unchecked" id=ev1 path=/d/dists/x/Packages.xz err="debian index line 12: too many .debs: over 1, the most remembered"`},
	} {
		var logs bytes.Buffer
		pc := openTestCache(t, t.TempDir(), 1<<20)
		pc.debs.max = tc.max
		p := &Proxy{log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: dropTime})), cfg: Config{PackageCache: pc}}
		tee := p.debIndexTee(io.NopCloser(tc.body), "repo", "ev1", "/d/dists/x/Packages.xz", func() {})
		var got []byte
		var err error
		if tc.read < 0 {
			got, err = io.ReadAll(tee)
		} else {
			got, err = io.ReadAll(io.LimitReader(tee, int64(tc.read)))
			tee.Close()
		}
		if digest := pc.debs.get("repo", debPoolFile); tc.read < 0 && err == nil && digest != tc.want {
			t.Errorf("%s: at the body's end the digest is %q, want %q", name, digest, tc.want)
		}
		<-tee.done
		if digest := pc.debs.get("repo", debPoolFile); digest != tc.want {
			t.Errorf("%s: digest %q, want %q (read %d bytes, %v)", name, digest, tc.want, len(got), err)
		}
		if tc.read < 0 && err == nil && !bytes.Equal(got, map[bool][]byte{true: two, false: one}[tc.max == 1]) {
			t.Errorf("%s: the body changed in passing", name)
		}
		if l := strings.TrimSpace(logs.String()); l != tc.logged {
			t.Errorf("%s: logged %q, want %q", name, l, tc.logged)
		}
	}
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// TestDebSplit: only a path a server reads one way splits into an
// archive root and the rest.
func TestDebSplit(t *testing.T) {
	for _, tc := range []struct {
		path, root, rest string
		ok               bool
	}{
		{"/debian/pool/main/a/a_1_all.deb", "/debian", "pool/main/a/a_1_all.deb", true},
		{"/pool/main/g++/g++_1~rc1+b1_amd64.deb", "", "pool/main/g++/g++_1~rc1+b1_amd64.deb", true},
		{"/u/evil/pool/x/pool/y.deb", "/u/evil", "pool/x/pool/y.deb", true},
		// apt escapes '+' and '~' in every path.
		{"/debian/pool/main/g/gcc-12/libstdc%2b%2b6_12.2.0-14_amd64.deb", "/debian", "pool/main/g/gcc-12/libstdc++6_12.2.0-14_amd64.deb", true},
		{"/debian/pool/main/o/openssl/openssl_3.0.15-1%7Edeb12u1_amd64.deb", "/debian", "pool/main/o/openssl/openssl_3.0.15-1~deb12u1_amd64.deb", true},
		{"/debian/pool/main/a/a%2fb.deb", "", "", false},
		{"/debian/pool/../../u/evil/pool/a.deb", "", "", false},
		{"/debian/./pool/a.deb", "", "", false},
		{"/debian//pool/a.deb", "", "", false},
		{"/debian/pool/..;/u/a.deb", "", "", false},
		{"/debian/pool/%2e%2e/a.deb", "", "", false},
		{"/debian/pool\\..\\a.deb", "", "", false},
		{"/debian/dists/a.deb", "", "", false},
		{"debian/pool/a.deb", "", "", false},
	} {
		root, rest, ok := debSplit(tc.path, "/pool/")
		if root != tc.root || rest != tc.rest || ok != tc.ok {
			t.Errorf("%s: %q %q %v, want %q %q %v", tc.path, root, rest, ok, tc.root, tc.rest, tc.ok)
		}
	}
}

// TestDebIndexNamesBounded: a Filename over maxDebName is not remembered
// (a hostile index cannot fill memory with long names), the bytes held
// are counted, and a root over maxDebName does not split.
func TestDebIndexNamesBounded(t *testing.T) {
	genuine := debBytes("gate-deb")
	long := "pool/main/l/" + strings.Repeat("l", 2*maxDebName) + "_1_all.deb"
	body := debIndexText(map[string][]byte{debPoolFile: genuine, long: genuine})
	pc := openTestCache(t, t.TempDir(), 1<<20)
	p := &Proxy{log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: Config{PackageCache: pc}}
	tee := p.debIndexTee(io.NopCloser(strings.NewReader(body)), "repo", "ev1", "/d/dists/x/Packages", func() {})
	if _, err := io.ReadAll(tee); err != nil {
		t.Fatal(err)
	}
	<-tee.done
	if got := pc.debs.get("repo", debPoolFile); got != sri(genuine) {
		t.Errorf("the plain .deb's digest is %q, want %q", got, sri(genuine))
	}
	if got := pc.debs.get("repo", long); got != "" {
		t.Errorf("a %d-byte Filename was remembered", len(long))
	}
	if want := (debFile{debPoolFile, sri(genuine)}).size("repo"); pc.debs.bytes != want {
		t.Errorf("bytes held %d, want %d", pc.debs.bytes, want)
	}
	deep := "/" + strings.Repeat("r", maxDebName) + "/pool/main/a/a_1_all.deb"
	if root, _, ok := debSplit(deep, "/pool/"); ok {
		t.Errorf("a %d-byte root split: %q", len(root), root)
	}
	if got, want := debRoots("/a/pool/b/pool/main/x/x_1_all.deb", "/pool/"), []string{"/a", "/a/pool/b"}; !slices.Equal(got, want) {
		t.Errorf("debRoots = %q, want %q", got, want)
	}
}

// TestDebDigestsRefetch: an index fetched again replaces its own entries
// and counts no bytes twice, so fetching it over and over never drops
// another repository's digests.
func TestDebDigestsRefetch(t *testing.T) {
	var d debDigests
	files := []debFile{{"pool/a/a_1_all.deb", sri(debBytes("a"))}, {"pool/b/b_1_all.deb", sri(debBytes("b"))}}
	if d.put("other", files[:1]) {
		t.Error("the first put reports dropped digests")
	}
	want := d.bytes + files[0].size("repo") + files[1].size("repo")
	for i := 0; i < 1000; i++ {
		if d.put("repo", files) {
			t.Fatalf("put %d dropped the digests", i)
		}
	}
	if d.bytes != want || len(d.m) != 3 || d.get("other", files[0].name) == "" {
		t.Errorf("after 1000 fetches of one index: %d bytes (want %d), %d entries, other's digest %q", d.bytes, want, len(d.m), d.get("other", files[0].name))
	}
}

// TestDebIndexParsesBounded: at most maxDebParses indices are parsed at
// once; another passes on unread, said in the log, and a slot is given
// back when its parse ends.
func TestDebIndexParsesBounded(t *testing.T) {
	var logs bytes.Buffer
	pc := openTestCache(t, t.TempDir(), 1<<20)
	p := &Proxy{log: slog.New(slog.NewTextHandler(&logs, nil)), cfg: Config{PackageCache: pc}}
	x := &exch{sc: &scope{scheme: "https"}, host: "deb.example.test", port: 443, v: policies.Verdict{Cat: &policies.Category{Name: "debian"}}}
	x.path = "/debian/dists/bookworm/main/binary-amd64/Packages"
	x.ev.e.HTTP = &audit.HTTP{Path: x.path}
	body := debIndexText(map[string][]byte{debPoolFile: debBytes("gate-deb")})
	respond := func() *http.Response {
		return p.debIndexResponse(x, &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))})
	}
	var held []*http.Response
	for i := 0; i < maxDebParses; i++ {
		r := respond()
		if _, read := r.Body.(*teeIndex); !read {
			t.Fatalf("index %d not read", i)
		}
		held = append(held, r)
	}
	if _, read := respond().Body.(*teeIndex); read || !strings.Contains(logs.String(), "others are being read") {
		t.Errorf("index %d read with %d being read (log %q)", maxDebParses+1, maxDebParses, logs.String())
	}
	io.ReadAll(held[0].Body)
	held[0].Body.Close()
	<-held[0].Body.(*teeIndex).done
	for end := time.Now().Add(5 * time.Second); len(pc.debParses) == maxDebParses && time.Now().Before(end); time.Sleep(time.Millisecond) {
	}
	if _, read := respond().Body.(*teeIndex); !read {
		t.Error("no slot given back after a parse ended")
	}
	for _, r := range held[1:] {
		r.Body.Close()
	}
}
