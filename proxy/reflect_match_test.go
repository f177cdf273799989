package proxy

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// refReplace is the matcher's meaning on a whole input: at each place the
// longest pattern that starts there is replaced; else the byte stays.
func refReplace(in []byte, pats []secretPattern) ([]byte, []int64) {
	var out []byte
	var offs []int64
	for i := 0; i < len(in); {
		best := -1
		for j, p := range pats {
			if len(p.find) > 0 && bytes.HasPrefix(in[i:], p.find) && (best < 0 || len(p.find) > len(pats[best].find)) {
				best = j
			}
		}
		if best < 0 {
			out = append(out, in[i])
			i++
			continue
		}
		out = append(out, pats[best].repl...)
		offs = append(offs, int64(i))
		i += len(pats[best].find)
	}
	return out, offs
}

// feedPieces runs the matcher over in cut at the given sizes (cycled).
func feedPieces(pats []secretPattern, in []byte, sizes []int) ([]byte, []int64, int) {
	var offs []int64
	m := newMatcher(pats, func(_ string, off int64) { offs = append(offs, off) })
	var out []byte
	maxCarry := 0
	for k := 0; len(in) > 0; k++ {
		n := min(len(in), max(sizes[k%len(sizes)], 0))
		out = m.feed(out, in[:n], false)
		maxCarry = max(maxCarry, len(m.carry))
		in = in[n:]
	}
	return m.feed(out, nil, true), offs, maxCarry
}

func pats(kv ...string) []secretPattern {
	var out []secretPattern
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, secretPattern{name: kv[i], find: []byte(kv[i]), repl: []byte(kv[i+1])})
	}
	return out
}

func TestMatcherSplitAcrossReads(t *testing.T) {
	secret := "real-secret-value-1234"
	in := []byte("a" + secret + "b" + secret + secret + "c" + secret[:5])
	p := pats(secret, "PH")
	want, wantOffs := refReplace(in, p)
	if string(want) != "aPHbPHPHc"+secret[:5] {
		t.Fatalf("reference: %q", want)
	}
	for size := 1; size <= len(in)+1; size++ {
		got, offs, carry := feedPieces(p, in, []int{size})
		if !bytes.Equal(got, want) {
			t.Fatalf("pieces of %d: %q, want %q", size, got, want)
		}
		if len(offs) != len(wantOffs) || offs[0] != 1 {
			t.Fatalf("pieces of %d: offsets %v, want %v", size, offs, wantOffs)
		}
		if carry >= len(secret) {
			t.Fatalf("pieces of %d: held back %d bytes, want < %d", size, carry, len(secret))
		}
	}
}

// A longer value that starts where a shorter one does wins, even when
// the cut falls between their ends.
func TestMatcherLongestAtACut(t *testing.T) {
	p := pats("abc", "1", "abcdef", "2")
	got, _, _ := feedPieces(p, []byte("xxabcdefyy"), []int{5, 100})
	if string(got) != "xx2yy" {
		t.Fatalf("got %q, want xx2yy", got)
	}
}

func TestReplaceAllHeader(t *testing.T) {
	var names []string
	got := replaceAll(pats("s3", "ph"), "Bearer s3, s3", func(n string, _ int64) { names = append(names, n) })
	if got != "Bearer ph, ph" || len(names) != 2 {
		t.Fatalf("got %q %v", got, names)
	}
	if s := "nothing"; replaceAll(pats("s3", "ph"), s, nil) != s {
		t.Fatal("changed a value without the secret")
	}
}

func TestMatcherRandomCuts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alpha := []byte("ab-")
	for range 2000 {
		in := make([]byte, r.IntN(60))
		for i := range in {
			in[i] = alpha[r.IntN(len(alpha))]
		}
		p := pats("ab-a", "X", "b-", "YY", "aab", "")
		sizes := []int{1 + r.IntN(7), 1 + r.IntN(3), 1 + r.IntN(20)}
		want, wantOffs := refReplace(in, p)
		got, offs, _ := feedPieces(p, in, sizes)
		if !bytes.Equal(got, want) || len(offs) != len(wantOffs) {
			t.Fatalf("%q cut %v: got %q (%v), want %q (%v)", in, sizes, got, offs, want, wantOffs)
		}
		for i := range offs {
			if offs[i] != wantOffs[i] {
				t.Fatalf("%q cut %v: offsets %v, want %v", in, sizes, offs, wantOffs)
			}
		}
	}
}

// FuzzMatcher: however a stream is cut, the matcher writes what a
// replacement over the whole stream writes, never holds back a whole
// value's length, and (with replacements that cannot form a value) never
// lets a value through.
func FuzzMatcher(f *testing.F) {
	f.Add([]byte("xx real-secret yy real-secret"), "real-secret", "real-sec", uint8(3), uint8(5))
	f.Add([]byte("aaaaab"), "aab", "a", uint8(1), uint8(2))
	f.Add([]byte(""), "s", "", uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, a, b string, c1, c2 uint8) {
		if len(a) == 0 || len(a) > 64 || len(b) > 64 {
			return
		}
		p := []secretPattern{{name: "a", find: []byte(a), repl: []byte("\x00")}}
		if len(b) > 0 && b != a {
			p = append(p, secretPattern{name: "b", find: []byte(b), repl: []byte("\x01")})
		}
		want, wantOffs := refReplace(in, p)
		got, offs, carry := feedPieces(p, in, []int{int(c1%17) + 1, int(c2%9) + 1})
		if !bytes.Equal(got, want) {
			t.Fatalf("got %q, want %q", got, want)
		}
		if len(offs) != len(wantOffs) {
			t.Fatalf("offsets %v, want %v", offs, wantOffs)
		}
		if carry >= max(len(a), len(b)) && carry > 0 {
			t.Fatalf("held back %d bytes", carry)
		}
		if !bytes.ContainsAny([]byte(a+b), "\x00\x01") && bytes.Contains(got, []byte(a)) {
			t.Fatalf("value %q delivered in %q", a, got)
		}
	})
}

// BenchmarkMatcher prices scanning a response body for one injected
// secret in its escaped forms, in the body reader's 32 KiB pieces.
func BenchmarkMatcher(b *testing.B) {
	benchMatcher(b, bytes.Repeat([]byte("0123456789abcdef{\"k\": \"value\"}\n"), (1<<20)/32))
}

// BenchmarkMatcherDense prices a body that echoes the secret densely
// (every 64 bytes, in its JSON form), where each replacement used to
// rescan the rest of the piece for every other pattern.
func BenchmarkMatcherDense(b *testing.B) {
	rec := []byte(`{"auth":"` + jsonEscape(signSecret) + `","pad":"0123456789abcdef"},` + "\n")
	benchMatcher(b, bytes.Repeat(rec, (1<<20)/len(rec)))
}

func benchMatcher(b *testing.B, body []byte) {
	p := patternsFor([]injection{{name: "s", value: signSecret, repl: signPH}})
	b.SetBytes(int64(len(body)))
	out := make([]byte, 0, 64<<10)
	for b.Loop() {
		m := newMatcher(p, nil)
		for in := body; len(in) > 0; {
			n := min(len(in), 32<<10)
			out = m.feed(out[:0], in[:n], false)
			in = in[n:]
		}
		m.feed(out[:0], nil, true)
	}
}
