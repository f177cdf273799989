package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzVerify: any file content gives a result or an error, never a panic
// or a hang.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"schema":1,"kind":"dns","seq":1,"prev_hash":""}` + "\n"))
	f.Add([]byte(`{"seq":2,"prev_hash":"00"}` + "\n" + `{"seq":1}` + "\n" + `{"seq":18446744073709551615}` + "\n"))
	f.Add([]byte(`{"kind":"gap","gap":{"dropped":3},"seq":5}` + "\nnot json\n\n"))
	f.Add([]byte("{\"seq\":1}\n{\"seq\":1}\n{\"seq\":3"))
	f.Add([]byte(`{"kind":"lifecycle","sandbox":"s","lifecycle":{"stage":"destroyed","last_seq":18446744073709551615,"final_hash":"00"},"seq":3}` + "\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "f.jsonl")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := Verify(path, path)
		if err == nil && res.Records > 0 && res.OK() {
			t.Fatalf("the same file twice cannot be an intact chain: %+v", res)
		}
	})
}

// FuzzParseTime: no input panics; accepted input gives a time.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"24h", "7d", "2026-11-30", "2026-11-30T08:00:00Z", "-1h", "99999999999d", ""} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		ParseTime(s, now)
	})
}

// FuzzFilterValue: any flag value is accepted or refused with an error,
// and an accepted one matches any event without a panic.
func FuzzFilterValue(f *testing.F) {
	for _, s := range []string{"443", "1-65535", "9-3", "0", "4xx", "404", "npm:left-*", "[a", "/v1/**", "would-deny", ""} {
		f.Add(s)
	}
	evs := sampleEvents()
	f.Fuzz(func(t *testing.T, v string) {
		for _, fl := range []Filter{
			{Match: Fields{Port: []string{v}}}, {Match: Fields{Status: []string{v}}}, {Match: Fields{Path: []string{v}}},
			{Match: Fields{Host: []string{v}}}, {Not: Fields{Package: []string{v}}}, {Match: Fields{Verdict: []string{v}}},
		} {
			if fl.Validate() != nil {
				continue
			}
			for i := range evs {
				fl.Matches(&evs[i])
			}
		}
	})
}

// FuzzReadJSONL: any input is read or refused with an error naming its
// line, never a panic.
func FuzzReadJSONL(f *testing.F) {
	f.Add([]byte(`{"schema":1,"kind":"dns","dns":{"qname":"a.test"},"seq":1}` + "\n\n" + `{"kind":"http","http":{"status":"x"}}`))
	f.Add([]byte{0x1f, 0x8b, 0, 1})
	f.Add([]byte(`{"kind":"lifecycle","sandbox":"s","lifecycle":{"stage":"destroyed","last_seq":99,"final_hash":"00"},"seq":2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = ReadJSONL([]string{"-"}, bytes.NewReader(data), func(e Event) error {
			if e.Kind == "" {
				t.Fatal("a record without a kind was passed on")
			}
			return nil
		})
	})
}
