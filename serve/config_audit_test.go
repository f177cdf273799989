package serve

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"airlock/audit"
)

// audit.node defaults to the host name and audit.jsonl_format to the
// airlock flavor; both are checked with their place.
func TestAuditNodeAndFormat(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skipf("no host name to default to: %v", err)
	}
	c, err := Parse("c.toml", []byte(minimal))
	if err != nil || c.Audit.Node != host || c.Audit.JSONLFormat != audit.FormatAirlock {
		t.Fatalf("defaults: node %q format %q, %v; want %q airlock", c.Audit.Node, c.Audit.JSONLFormat, err, host)
	}
	c, err = Parse("c.toml", []byte(minimal+"[audit]\nnode = \"edge-3\"\njsonl_format = \"ocsf\"\n"))
	if err != nil || c.Audit.Node != "edge-3" || c.Audit.JSONLFormat != audit.FormatOCSF {
		t.Fatalf("set: %+v, %v", c.Audit, err)
	}
	for src, want := range map[string]string{
		"[audit]\njsonl_format = \"cef\"\n": `c.toml:8:17: audit.jsonl_format: unknown stream format "cef" (want "airlock" or "ocsf")`,
		"[audit]\nnode = \"edge 3\"\n":      `c.toml:8:1: audit.node "edge 3": only printable characters without spaces`,
		"[audit]\nnode = \"a\\u0007b\"\n":   `c.toml:8:1: audit.node "a\ab": only printable`,
	} {
		_, err := Parse("c.toml", []byte(minimal+src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
}

// The appliance's pipeline stamps audit.node on every record and writes
// the flavor audit.jsonl_format names, with the appliance's version.
func TestStartAuditNodeAndFormat(t *testing.T) {
	c, err := Parse("c.toml", []byte(minimal+"[audit]\nnode = \"edge-3\"\njsonl_format = \"ocsf\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.Audit.Store = filepath.Join(t.TempDir(), audit.StoreFile)
	var buf bytes.Buffer
	a := &Appliance{cfg: c, opts: Options{JSONL: &buf, Version: "v9"}, log: slog.New(slog.DiscardHandler)}
	if err := a.startAudit(t.Context()); err != nil {
		t.Fatal(err)
	}
	e := audit.New(audit.KindPolicy, "")
	e.Policy = &audit.Policy{Action: "loaded", Name: "p"}
	a.pipeline.Emit(e)
	if err := a.pipeline.Close(); err != nil {
		t.Fatal(err)
	}
	l := buf.String()
	for _, want := range []string{`"class_uid":0,`, `"device":{"hostname":"edge-3"`, `"version":"v9"`, `"unmapped":{"ocsf_mapping":1,"airlock":{"schema":1,`, `"node":"edge-3"`} {
		if !strings.Contains(l, want) {
			t.Errorf("stream line lacks %s: %s", want, l)
		}
	}
}
