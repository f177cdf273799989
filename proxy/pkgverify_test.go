package proxy

import (
	"bytes"
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
