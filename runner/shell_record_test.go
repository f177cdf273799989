package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func shellTestRunner(t *testing.T, secrets ...string) *Runner {
	t.Helper()
	clock := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	return &Runner{cfg: Config{StateDir: t.TempDir(), SecretValues: func(string) []string { return secrets },
		Now: func() time.Time { clock = clock.Add(time.Millisecond); return clock }}}
}

func readShellFile(t *testing.T, r *Runner, id, exec string) []ShellLine {
	t.Helper()
	f, err := os.Open(filepath.Join(r.shellsDir(id), exec+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ls, err := ReadShellRecord(f)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// TestShellRecordHoldsTypedAndShown: keys typed one at a time and the
// terminal's output become timed lines, the secret typed key by key is
// never in the record, and the end line counts the bytes.
func TestShellRecordHoldsTypedAndShown(t *testing.T) {
	const secret = "s3cr3t-value-77"
	r := shellTestRunner(t, secret)
	rec, err := r.openShellRecord(ShellStart{Sandbox: "sb1", Exec: "x1", Principal: "alice", Argv: []string{"/bin/sh"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range "echo hi " + secret + "\r" {
		rec.typed().Write([]byte(string(c)))
	}
	rec.shown().Write([]byte("echo hi " + secret[:5]))
	rec.shown().Write([]byte(secret[5:] + "\r\nhi " + secret + "\r\n/ # "))
	if err := rec.close(0); err != nil {
		t.Fatal(err)
	}
	ls := readShellFile(t, r, "sb1", "x1")
	var in, out strings.Builder
	for i, l := range ls {
		if l.Time.IsZero() {
			t.Errorf("line %d has no time", i)
		}
		in.WriteString(l.In)
		out.WriteString(l.Out)
	}
	if ls[0].Start == nil || ls[0].Start.Principal != "alice" || ls[len(ls)-1].End == nil {
		t.Fatalf("record has no start or end line: %+v", ls)
	}
	if got, want := in.String(), "echo hi [REDACTED]\r"; got != want {
		t.Errorf("typed %q, want %q", got, want)
	}
	if got, want := out.String(), "echo hi [REDACTED]\r\nhi [REDACTED]\r\n/ # "; got != want {
		t.Errorf("shown %q, want %q", got, want)
	}
	end := ls[len(ls)-1].End
	if end.InBytes != int64(len("echo hi "+secret+"\r")) || end.Redactions != 3 || end.Cut {
		t.Errorf("end %+v", end)
	}
	b, _ := os.ReadFile(filepath.Join(r.shellsDir("sb1"), "x1.jsonl"))
	if strings.Contains(string(b), secret) {
		t.Errorf("the record holds the secret: %s", b)
	}
}

// TestShellRecordBounded: output past MaxShellRecordBytes is counted but
// not kept, and the end line says the record was cut.
func TestShellRecordBounded(t *testing.T) {
	r := shellTestRunner(t)
	rec, err := r.openShellRecord(ShellStart{Sandbox: "sb1", Exec: "x2", Argv: []string{"sh"}})
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("y", 99) + "\n")
	total := 0
	for total < 2*MaxShellRecordBytes {
		rec.shown().Write(line)
		total += len(line)
	}
	if err := rec.close(0); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(r.shellsDir("sb1"), "x2.jsonl"))
	if err != nil || fi.Size() > MaxShellRecordBytes+512 {
		t.Fatalf("record size %v (%v), want at most %d", fi.Size(), err, MaxShellRecordBytes+512)
	}
	ls := readShellFile(t, r, "sb1", "x2")
	end := ls[len(ls)-1].End
	if end == nil || !end.Cut || end.OutBytes != int64(total) {
		t.Errorf("end %+v, want cut with %d bytes out", end, total)
	}
}
