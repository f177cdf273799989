package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"testing"
	"testing/iotest"

	"airlock/audit"
)

// TestVerifyBody: every byte but the last passes as it comes; the last
// only when the whole matched; a mismatch ends in an error, never EOF.
func TestVerifyBody(t *testing.T) {
	art := bytes.Repeat([]byte("artifact-"), 5000)
	sum := sha512.Sum512(art)
	good := "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
	bad := "sha512-" + base64.StdEncoding.EncodeToString(make([]byte, 64))
	readers := map[string]func(io.Reader) io.Reader{
		"plain": func(r io.Reader) io.Reader { return r }, "one byte": iotest.OneByteReader,
		"half": iotest.HalfReader, "data+EOF": iotest.DataErrReader,
	}
	for name, wrap := range readers {
		for _, sri := range []string{good, bad} {
			spec := newVerifySpec([]string{"sha256-" + base64.StdEncoding.EncodeToString(make([]byte, 32)), sri})
			if spec == nil {
				t.Fatal("no spec")
			}
			x := &exch{}
			x.ev.e = audit.New(audit.KindHTTP, "sb")
			x.ev.e.HTTP = &audit.HTTP{}
			p := &Proxy{log: slog.New(slog.DiscardHandler)}
			b := &verifyBody{p: p, x: x, rc: io.NopCloser(wrap(bytes.NewReader(art))), spec: spec}
			got, err := io.ReadAll(b)
			switch {
			case sri == good && (err != nil || !bytes.Equal(got, art)):
				t.Errorf("%s: good artifact: %d bytes, %v", name, len(got), err)
			case sri == bad && (!errors.Is(err, errIntegrity) || len(got) >= len(art) || !x.ev.cut || x.ev.e.Verdict != "deny"):
				t.Errorf("%s: tampered artifact: %d of %d bytes, %v, cut %v verdict %q", name, len(got), len(art), err, x.ev.cut, x.ev.e.Verdict)
			}
		}
	}
}

// TestVerifySpecGroups: with the category's and the sandbox's lockfiles
// both listing a version, the artifact must match a digest of each.
func TestVerifySpecGroups(t *testing.T) {
	art := []byte("artifact")
	s512, s256 := sha512.Sum512(art), sha256.Sum256(art)
	good512 := "sha512-" + base64.StdEncoding.EncodeToString(s512[:])
	good256 := "sha256-" + base64.StdEncoding.EncodeToString(s256[:])
	bad256 := "sha256-" + base64.StdEncoding.EncodeToString(make([]byte, 32))
	cases := []struct {
		groups [][]string
		want   bool
	}{
		{[][]string{{good512}, {good256}}, true},
		{[][]string{{good512}, {bad256, good256}}, true},
		{[][]string{{good512}, {bad256}}, false},
		{[][]string{{bad256}, {good512}}, false},
		{[][]string{{"sha999-x"}, {good512}}, true}, // an unreadable digest is no group (lockfiles' are checked when read)
	}
	for i, c := range cases {
		spec := newVerifySpec(c.groups...)
		spec.write(art)
		if got := spec.matches(); got != c.want {
			t.Errorf("case %d %v: matches %v", i, c.groups, got)
		}
	}
}
