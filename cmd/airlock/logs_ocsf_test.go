//go:build !airlock_thin

package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/audit"
)

// writeStream runs events through a pipeline that streams the given
// flavor to a file, and returns the file.
func writeStream(t *testing.T, format audit.Format, evs []audit.Event) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	p, err := audit.NewPipeline(audit.Config{StreamPath: path, StreamFormat: format, Node: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		p.Emit(e)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// `airlock logs --input` reads an OCSF stream back as the very records of
// the airlock flavor (filters and every output alike), and `logs verify`
// checks its chain.
func TestLogsInputOCSF(t *testing.T) {
	evs := responderFixture()
	plain, ocsf := writeStream(t, audit.FormatAirlock, evs), writeStream(t, audit.FormatOCSF, evs)
	for _, args := range [][]string{{"-o", "jsonl"}, {"-o", "compact", "--verdict", "deny"}, {"--sandbox", "7b11"}} {
		want, _, err := runLogsIn(t, "", append([]string{"--input", plain}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := runLogsIn(t, "", append([]string{"--input", ocsf}, args...)...)
		if err != nil || got != want || want == "" {
			t.Errorf("%v: ocsf input: %v\n got: %s\nwant: %s", args, err, got, want)
		}
	}
	b, _ := os.ReadFile(ocsf)
	got, _, err := runLogsIn(t, string(b), "--input", "-", "-o", "jsonl")
	if err != nil || !strings.Contains(got, `"node":"node-a"`) || strings.Contains(got, "class_uid") {
		t.Errorf("stdin: %v\n%s", err, got)
	}
	out, err := runLogsCmd(t, "verify", ocsf)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); err != nil || !strings.HasPrefix(lines[len(lines)-1], "ok: 7 records") {
		t.Fatalf("verify: %v %s", err, out)
	}
}

// An OCSF line without its Airlock record is refused with its place.
func TestLogsInputOCSFWithoutRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ocsf.jsonl")
	os.WriteFile(path, []byte(`{"class_uid":4003,"activity_id":1,"time":1}`+"\n"), 0o600)
	_, _, err := runLogsIn(t, "", "--input", path)
	if err == nil || !strings.Contains(err.Error(), path+":1: an OCSF record without unmapped.airlock") {
		t.Fatalf("err = %v", err)
	}
	out, err := runLogsCmd(t, "verify", path)
	var ee exitError
	if !errors.As(err, &ee) || !strings.Contains(out, path+":1: invalid: an OCSF record without unmapped.airlock") {
		t.Fatalf("verify: %v\n%s", err, out)
	}
}
