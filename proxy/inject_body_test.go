package proxy

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// cutReader gives in back in reads of the given sizes (cycled).
type cutReader struct {
	in    []byte
	sizes []int
	k     int
}

func (r *cutReader) Read(p []byte) (int, error) {
	if len(r.in) == 0 {
		return 0, io.EOF
	}
	n := min(len(r.in), len(p), r.sizes[r.k%len(r.sizes)])
	r.k++
	copy(p, r.in[:n])
	r.in = r.in[n:]
	return n, nil
}

// FuzzWatchedBody: however a request body is cut into reads, the watched
// body stops exactly when it holds a placeholder — before the whole of
// one is released — and otherwise passes every byte unchanged.
func FuzzWatchedBody(f *testing.F) {
	f.Add([]byte("k=v&sig=PLACEHOLDER-1&end"), "PLACEHOLDER-1", "PH2", uint8(3), uint8(7))
	f.Add([]byte("PLACEHOLDPLACEHOLDER-1"), "PLACEHOLDER-1", "", uint8(1), uint8(2))
	f.Add([]byte("no placeholder here"), "PLACEHOLDER-1", "here!", uint8(5), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, a, b string, c1, c2 uint8) {
		if len(a) == 0 || len(a) > 64 || len(b) > 64 {
			return
		}
		pats := []secretPattern{{name: "a", find: []byte(a)}}
		if b != "" && b != a {
			pats = append(pats, secretPattern{name: "b", find: []byte(b)})
		}
		r := &cutReader{in: in, sizes: []int{int(c1%17) + 1, int(c2%9) + 1}}
		w := newWatchedBody(io.NopCloser(r), pats, map[string]string{"a": "ra", "b": "rb"}, nil)
		got, err := io.ReadAll(w)
		holds := false
		for _, p := range pats {
			holds = holds || bytes.Contains(in, p.find)
		}
		switch {
		case holds != errors.Is(err, errPlaceholderInBody):
			t.Fatalf("holds a placeholder %v, error %v", holds, err)
		case !holds && !bytes.Equal(got, in):
			t.Fatalf("passed %q, want %q", got, in)
		case !bytes.HasPrefix(in, got):
			t.Fatalf("released %q, not a prefix of the body", got)
		}
		for _, p := range pats {
			if bytes.Contains(got, p.find) {
				t.Fatalf("released a whole placeholder %q in %q", p.find, got)
			}
		}
		if name, reason := w.result(); holds && (name == "" || reason == "") {
			t.Fatalf("result %q %q after a find", name, reason)
		}
	})
}
