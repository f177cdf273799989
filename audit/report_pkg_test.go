package audit

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReportPackageGate: the package table shows what was installed,
// what was denied and why, and which versions the gate hid.
func TestReportPackageGate(t *testing.T) {
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir})
	e := New(KindLifecycle, "sb-1")
	e.Time = t0
	e.Lifecycle = &Lifecycle{Stage: "started", Image: "i", Policy: "p"}
	p.Emit(e)
	http := func(i int, verdict, reason, path string, pkg *Package) {
		e := New(KindHTTP, "sb-1")
		e.Time, e.ID, e.Verdict, e.Reason, e.Category = t0.Add(time.Duration(i)*time.Second), "h"+path, verdict, reason, "registries"
		e.HTTP = &HTTP{Method: "GET", Scheme: "https", Host: "registry.example.test", Path: path, Status: 200, Package: pkg}
		p.Emit(e)
	}
	http(1, "allow", "the package gate hid 1 of 3 versions", "/left-pad", &Package{Ecosystem: "npm", Name: "left-pad",
		Gated: []GatedVersion{{Version: "2.0.0", Reason: "package_too_new: left-pad@2.0.0 was published 2026-12-01T10:00:00Z (2h0m0s ago); min_release_age is 3d", Rule: "categories.registries.min_release_age"}}, GatedTotal: 1})
	http(2, "allow", "", "/left-pad/-/left-pad-1.3.0.tgz", &Package{Ecosystem: "npm", Name: "left-pad", Version: "1.3.0", Published: "2026-10-01T00:00:00Z", Cache: "hit"})
	http(3, "deny", "osv:MAL-2026-0001: Malicious code in evil", "/evil/-/evil-1.0.1.tgz", &Package{Ecosystem: "npm", Name: "evil", Version: "1.0.1"})
	flush(t, p)
	p.Close()
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := BuildReport(context.Background(), st, "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Packages) != 3 {
		t.Fatalf("packages %+v", r.Packages)
	}
	if g := r.Packages[0].Gated; len(g) != 1 || !strings.HasPrefix(g[0], "2.0.0: package_too_new") {
		t.Errorf("gated %v", g)
	}
	if u := r.Packages[1]; u.Published != "2026-10-01T00:00:00Z" || u.Reason != "" || u.Cache != "hit" {
		t.Errorf("installed %+v", u)
	}
	if u := r.Packages[2]; u.Verdict != "deny" || !strings.HasPrefix(u.Reason, "osv:MAL-2026-0001") {
		t.Errorf("denied %+v", u)
	}
	var md, html bytes.Buffer
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := r.HTML(&html); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{md.String(), html.String()} {
		if !strings.Contains(out, "osv:MAL-2026-0001: Malicious code in evil") || !strings.Contains(out, "2.0.0: package_too_new: left-pad@2.0.0") {
			t.Errorf("report lacks the gate's reasons:\n%s", out)
		}
	}
	if !strings.Contains(md.String(), "| hit |") || !strings.Contains(html.String(), "<td>hit</td>") {
		t.Errorf("report lacks the cache hit:\n%s\n%s", md.String(), html.String())
	}
}
