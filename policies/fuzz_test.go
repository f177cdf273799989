package policies

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics, and a policy it accepts can decide any
// request line the fuzzer also invents without panicking.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("examples/*.toml")
	more, _ := filepath.Glob("testdata/*.toml")
	for _, name := range append(files, more...) {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data, "GET https://git.example.test/o/r.git/info/refs?service=git-receive-pack")
		}
	}
	f.Add([]byte("version = 1\n[categories.git]\nhosts = [\"*.a.test\"]\n"), "dns x.a.test TXT")
	f.Add([]byte("version = 1\n[categories.\"q.\\\"x\"]\nkind='git'\nhosts = ['''a.test''']\n[[tests]]\nrequest=\"connect a.test:443\"\nexpect=\"allow\"\n"), "connect a.test:443 ip=::1")
	f.Add([]byte("\ufeffversion = 1\n# \u202e\n[categories.public_web]\nhosts = [\"*.co.uk\", \"b\u00fccher.test\", \"b\u00fccher.test\"]\ncidrs = [\"0.0.0.0/0\", \"::ffff:0:0/96\"]\nports = [\"1-65535\", 80]\nroutes = [{methods=[\"*\"], path=\"/**\"}, {methods=[\"GET\"], path=\"/x\"}]\n[[tests]]\nrequest = \"dns a.test\"\nexpect = \"deny\"\nrule = \"categories.x.routes[9]\"\n"), "dns a.test")
	f.Add([]byte("[[a]]\n[[a.b]]\n[a.b.c]\nx = [[1,2],[{y=\"\"\"z\"\"\"}]]\n"), "POST http://[::1]:80/%2e%2e/")
	f.Fuzz(func(t *testing.T, data []byte, line string) {
		p, err := Parse("fuzz.toml", data)
		if err != nil {
			if _, ok := err.(ErrorList); !ok {
				t.Fatalf("Parse returned %T, want ErrorList", err)
			}
			if strings.Contains(err.Error(), internalErrorMsg) {
				t.Fatalf("Parse panicked (recovered): %v", err)
			}
			return
		}
		for _, w := range p.Warnings() {
			if strings.Contains(w.Msg, lintInternalMsg) {
				t.Fatalf("a lint panicked (recovered): %v", w)
			}
		}
		if r, err := ParseRequest(line); err == nil {
			p.Decide(r)
			p.Explain(r)
		}
		p.RunTests()
	})
}

// FuzzDecide: any request against a fixed policy decides without panicking,
// and a request that is allowed is never a git push.
func FuzzDecide(f *testing.F) {
	p, err := Load("examples/coding-agent.toml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("POST", "git.example.test", "/acme/app.git/git-receive-pack", "")
	f.Add("GET", "git.example.test", "/acme/app.git/info/refs", "service=git-upload-pack")
	f.Add("GET", "registry.example.test", "/@evil%2ftool", "")
	f.Fuzz(func(t *testing.T, method, host, path, query string) {
		r := Request{Stage: StageHTTP, Method: method, Scheme: "https", Host: host, Path: path, Query: query}
		v := p.Decide(r)
		if v.Action.Allows() && v.Category == "git" && isReceivePack(path, query) {
			t.Fatalf("push allowed: %+v -> %+v", r, v)
		}
		p.Decide(Request{Stage: StageDNS, Host: host})
		p.Decide(Request{Stage: StageConnect, Host: host, SNI: path, Port: 443})
		NormalizeHost(host)
		NormalizePath(path)
		RecognizePackage(host, path)
	})
}
