//go:build !airlock_thin

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLogsVerifyJSON: logs verify --json gives the verdict and every break
// as data, with the same exit codes as the text form (users.md S10).
func TestLogsVerifyJSON(t *testing.T) {
	dir := seedAuditStore(t, logsFixture(time.Now()))
	stream := filepath.Join(dir, "events.jsonl")
	var res verifyJSON
	out, errs, code := runCLI(t, "logs", "verify", "--json", stream)
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || !res.OK || res.Records != 4 || res.FinalHash == "" || len(res.Problems) != 0 {
		t.Fatalf("intact: exit %d, %v, %+v\n%s%s", code, err, res, out, errs)
	}
	b, _ := os.ReadFile(stream)
	if err := os.WriteFile(stream, bytes.Replace(b, []byte(`"deny"`), []byte(`"allow"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	res = verifyJSON{}
	out, _, code = runCLI(t, "logs", "verify", "--json", stream)
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 || res.OK || len(res.Problems) == 0 ||
		res.Problems[0].File != stream || res.Problems[0].Line != 2 || res.Problems[0].Kind != "modified" {
		t.Fatalf("edited line 2: exit %d, %v, %+v\n%s", code, err, res, out)
	}
}
