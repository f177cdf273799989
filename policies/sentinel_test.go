package policies

import (
	"slices"
	"strings"
	"testing"
)

func TestSentinelHeaders(t *testing.T) {
	src := func(extra string) string {
		return "version = 1\n[categories.api]\nkind = \"public_web\"\nhosts = [\"api.example.test\"]\nsentinels = [\"k\"]\n" + extra
	}
	cat := func(t *testing.T, s string) *Category {
		t.Helper()
		p, err := Parse("s.toml", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		v := p.Decide(Request{Stage: StageHTTP, Host: "api.example.test", Port: 443, Method: "GET", Scheme: "https", Path: "/"})
		if v.Cat == nil {
			t.Fatalf("no category: %+v", v)
		}
		return v.Cat
	}
	if got := cat(t, src("")).SentinelHeaders; !slices.Equal(got, []string{"Authorization"}) {
		t.Errorf("default = %q, want [Authorization]", got)
	}
	if got := cat(t, src(`sentinel_headers = ["x-sign", "Cookie"]`+"\n")).SentinelHeaders; !slices.Equal(got, []string{"X-Sign", "Cookie"}) {
		t.Errorf("configured = %q", got)
	}
	if got := cat(t, src("sentinel_headers = []\n")).SentinelHeaders; len(got) != 0 {
		t.Errorf("empty = %q", got)
	}
	for _, tc := range []struct{ extra, want string }{
		{`sentinel_headers = ["Host"]`, `s.toml:6:21: categories.api.sentinel_headers[0]: "Host" frames or routes the request`},
		{`sentinel_headers = ["ok", "bad header"]`, `categories.api.sentinel_headers[1]: "bad header" is not an HTTP header name`},
		{`sentinel_headers = ["content-length"]`, `"content-length" frames or routes the request`},
	} {
		_, err := Parse("s.toml", []byte(src(tc.extra+"\n")))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.extra, err, tc.want)
		}
	}
	_, err := Parse("s.toml", []byte("version = 1\n[categories.api]\nkind = \"public_web\"\nhosts = [\"api.example.test\"]\nsentinel_headers = [\"X-Sign\"]\n"))
	if err == nil || !strings.Contains(err.Error(), "categories.api.sentinel_headers: sentinel_headers without sentinels") {
		t.Errorf("without sentinels: err = %v", err)
	}
}
