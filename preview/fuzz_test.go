package preview

import (
	"strings"
	"testing"
	"time"
)

// FuzzPreviewID: any Host header either names a well-formed preview id
// under the preview host, or is refused with an error; never a panic.
func FuzzPreviewID(f *testing.F) {
	for _, s := range []string{"pv0123456789abcdef." + testHost, "pv0123456789abcdef." + testHost + ":8443", testHost,
		"..%2f." + testHost, "PV0123456789ABCDEF." + testHost + ".", "[::1]:443", "x.pv0123456789abcdef." + testHost, ""} {
		f.Add(s)
	}
	m, err := New(Config{Host: testHost, Key: make([]byte, 32), Dial: loopDialer})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host string) {
		id, err := m.previewID(host)
		if err != nil {
			return
		}
		if !idRE.MatchString(id) || !strings.Contains(strings.ToLower(host), id+"."+testHost) {
			t.Fatalf("host %q accepted as %q", host, id)
		}
	})
}

// FuzzVerify: a token verifies only if it is what sign made for that key,
// kind and preview; anything else is an error, never a panic.
func FuzzVerify(f *testing.F) {
	key := []byte(strings.Repeat("k", 32))
	good := sign(key, claim{Kind: kindLink, Preview: "pv0123456789abcdef", Principal: "alice", Expires: time.Unix(2e9, 0), Nonce: "n"})
	for _, s := range []string{good, good + "x", "a.b", ".", "", strings.Repeat("A", 2000)} {
		f.Add(s)
	}
	now := time.Unix(1.9e9, 0)
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := verify(key, tok, kindLink, "pv0123456789abcdef", now)
		if err != nil {
			return
		}
		pl, mc, _ := strings.Cut(tok, ".")
		raw, _ := b64.DecodeString(pl)
		if b64.EncodeToString(mac(key, string(raw))) != mc || c.Preview != "pv0123456789abcdef" || c.Kind != kindLink || !now.Before(c.Expires) {
			t.Fatalf("accepted %+v", c)
		}
	})
}
