package audit

import (
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
