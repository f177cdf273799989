package audit

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A secret_reflected record goes through the pipeline to the store, is
// found by its kind and host, and reads as one line.
func TestSecretReflectedStored(t *testing.T) {
	dir := t.TempDir()
	p := newTestPipeline(t, Config{StateDir: dir, StreamPath: filepath.Join(dir, "events.jsonl")})
	e := New(KindSecretReflected, "sb-1")
	e.ID, e.Rule, e.Category = "h1", "proxy.reflect", "api"
	e.SecretReflected = &SecretReflected{Secret: "api-token", Host: "api.example.test", Position: "body", Offset: 17, Count: 2, Action: "replaced"}
	p.Emit(e)
	flush(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := OpenStoreReadOnly(filepath.Join(dir, StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.Query(context.Background(), Query{Kind: KindSecretReflected, Host: "api.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("query found %d records, want 1", len(got))
	}
	if d := cmp.Diff(*e.SecretReflected, *got[0].SecretReflected); d != "" {
		t.Errorf("stored payload differs:\n%s", d)
	}
	if s := Summary(&got[0]); s != "secret api-token replaced by api.example.test at body x2" {
		t.Errorf("summary %q", s)
	}
}
