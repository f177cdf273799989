package audit

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ids names the sample events a filter keeps, as kind/id.
func filterIDs(f Filter) []string {
	var out []string
	for _, e := range sampleEvents() {
		if f.Matches(&e) {
			out = append(out, string(e.Kind)+"/"+e.ID)
		}
	}
	return out
}

func TestFilterMatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Filter
		want []string
	}{
		{"repeated verdict", Filter{Match: Fields{Verdict: []string{"deny", "ask"}}},
			[]string{"dns/d2", "flow/f2", "drop/", "approval/a1"}},
		{"negated kind", Filter{Match: Fields{Verdict: []string{"deny"}}, Not: Fields{Kind: []string{"drop", "dns"}}},
			[]string{"flow/f2"}},
		{"not category", Filter{Match: Fields{Kind: []string{"http"}}, Not: Fields{Category: []string{"docs"}}},
			[]string{"http/h1"}},
		{"would deny", Filter{Match: Fields{Verdict: []string{"would-deny"}}}, []string{"http/h2"}},
		{"method", Filter{Match: Fields{Method: []string{"get"}}}, []string{"http/h1", "http/h2"}},
		{"path glob below", Filter{Match: Fields{Path: []string{"/left-pad/**"}}}, []string{"http/h1"}},
		{"path glob", Filter{Match: Fields{Path: []string{"/g*"}}}, []string{"http/h2"}},
		{"port 443", Filter{Match: Fields{Port: []string{"443"}}}, []string{"flow/f1", "http/h1", "flow/f2", "http/h2"}},
		{"port range", Filter{Match: Fields{Port: []string{"100-200"}}}, []string{"drop/"}},
		{"port dns", Filter{Match: Fields{Port: []string{"53"}}}, []string{"dns/d1", "dns/d2"}},
		{"status class", Filter{Match: Fields{Status: []string{"2xx"}}, Not: Fields{Host: []string{"docs.*"}}}, []string{"http/h1"}},
		{"package", Filter{Match: Fields{Package: []string{"npm:left-*"}}}, []string{"http/h1"}},
		{"package other ecosystem", Filter{Match: Fields{Package: []string{"pypi:left-pad"}}}, nil},
		{"exec id", Filter{Match: Fields{ExecID: []string{"x1"}}}, []string{"exec/x1", "exec/x1"}},
		{"principal matches only refusal records", Filter{Match: Fields{Principal: []string{"alice"}}}, nil},
		{"sandbox prefix", Filter{Match: Fields{Sandbox: []string{"sb"}, Kind: []string{"lifecycle"}}}, []string{"lifecycle/", "lifecycle/"}},
		{"host trailing dot and case", Filter{Match: Fields{Host: []string{"REGISTRY.example.test."}, Kind: []string{"dns"}}}, []string{"dns/d1"}},
		{"rule without position", Filter{Match: Fields{Rule: []string{"deny.hosts[0]"}}}, []string{"flow/f2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.f.Validate(); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, filterIDs(tc.f)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestFilterValidate(t *testing.T) {
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{Match: Fields{Kind: []string{"dnss"}}}, `--kind "dnss": want one of dns, flow`},
		{Filter{Not: Fields{Verdict: []string{"maybe"}}}, `--not-verdict "maybe": want one of allow`},
		{Filter{Match: Fields{Port: []string{"0"}}}, `--port "0": want a port 1..65535`},
		{Filter{Match: Fields{Port: []string{"9-3"}}}, `--port "9-3": range 9-3 runs backwards`},
		{Filter{Match: Fields{Status: []string{"6xx"}}}, `--status "6xx": want a status`},
		{Filter{Match: Fields{Host: []string{"[a"}}}, `--host "[a": bad glob`},
		{Filter{Not: Fields{Category: []string{""}}}, `--not-category "": empty value`},
	} {
		err := tc.f.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.f, err, tc.want)
		}
	}
}

// Pushdown never narrows: what the store returns for it, filtered by
// Matches, is what Matches keeps of everything.
func TestFilterPushdownIsSuperset(t *testing.T) {
	st := sampleStore(t)
	all, err := st.Query(t.Context(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []Filter{
		{Match: Fields{Kind: []string{"http"}, Host: []string{"*.EXAMPLE.test"}}},
		{Match: Fields{Verdict: []string{"would_deny"}}},
		{Match: Fields{Rule: []string{"deny.hosts[0]"}, Verdict: []string{"deny"}}},
		{Match: Fields{Category: []string{"registries"}, Sandbox: []string{"sb-2"}}},
	} {
		q, _ := f.Pushdown()
		pushed, err := st.Query(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		var a, b []uint64
		for _, e := range all {
			if f.Matches(&e) {
				a = append(a, e.Seq)
			}
		}
		for _, e := range pushed {
			if f.Matches(&e) {
				b = append(b, e.Seq)
			}
		}
		if len(a) == 0 || !cmp.Equal(a, b) {
			t.Errorf("%+v: all-then-match %v, pushdown-then-match %v", f, a, b)
		}
	}
}

func TestReadJSONLRotatedAndGzip(t *testing.T) {
	dir := t.TempDir()
	stream := filepath.Join(dir, "events.jsonl")
	p := newTestPipeline(t, Config{StateDir: dir, StreamPath: stream})
	for _, e := range sampleEvents() {
		p.Emit(e)
	}
	flush(t, p)
	p.Close()
	lines := readLines(t, stream)
	// A rotated set: .2.gz (oldest, compressed), .1, and the live file.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(append(bytes.Join(lines[:5], []byte("\n")), '\n'))
	zw.Close()
	os.WriteFile(stream+".2.gz", gz.Bytes(), 0o600)
	writeLines(t, stream+".1", lines[5:10])
	writeLines(t, stream, lines[10:])
	var seqs []uint64
	err := ReadJSONL([]string{stream, stream + ".1", stream + ".2.gz"}, nil, func(e Event) error {
		seqs = append(seqs, e.Seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("seqs out of chain order: %v", seqs)
		}
	}
	if len(seqs) != len(lines) {
		t.Fatalf("read %d of %d records", len(seqs), len(lines))
	}
	// stdin, and a broken line named by place.
	err = ReadJSONL([]string{"-"}, strings.NewReader(string(lines[0])+"\n{not json\n"), func(Event) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "stdin:2: not an audit record") {
		t.Fatalf("broken stdin line: %v", err)
	}
	if err := ReadJSONL([]string{dir}, nil, func(Event) error { return nil }); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("directory: %v", err)
	}
}

// TestFilterPrincipal: --principal matches the principal a refusal
// record names, and nothing else.
func TestFilterPrincipal(t *testing.T) {
	r := New(KindRefusal, "")
	r.Refusal = &Refusal{Principal: "alice", Action: "GET /v1/sandboxes/x", Status: 404, Code: "not_found"}
	f := Filter{Match: Fields{Principal: []string{"alice"}}}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	if !f.Matches(&r) {
		t.Error("alice's refusal did not match --principal alice")
	}
	if bob := (Filter{Match: Fields{Principal: []string{"bob"}}}); bob.Matches(&r) {
		t.Error("alice's refusal matched --principal bob")
	}
	d := New(KindDNS, "sb")
	if f.Matches(&d) {
		t.Error("a dns record matched --principal alice")
	}
}
