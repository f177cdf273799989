package policies

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const committedSchema = "../docs/policy.schema.json"

// TestSchemaIsCurrent: docs/policy.schema.json is what Schema generates
// from the loader's wire structs; regenerate it with `make schema`.
func TestSchemaIsCurrent(t *testing.T) {
	got, err := Schema()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(committedSchema)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run `make schema`", committedSchema)
	}
}

// TestSchemaCoversTheLoader: every key the loader reads has a type, and
// no type is left for a key it does not read.
func TestSchemaCoversTheLoader(t *testing.T) {
	loader, types := loaderKeys(), schemaKeys()
	for sec, keys := range loader {
		keys = slices.Sorted(slices.Values(keys))
		if !slices.Equal(keys, types[sec]) {
			t.Errorf("section %q: loader reads %v, schema types %v", sec, keys, types[sec])
		}
	}
	for sec := range types {
		if _, ok := loader[sec]; !ok {
			t.Errorf("schema types section %q the loader does not have", sec)
		}
	}
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := Schema()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("policy.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("policy.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tomlAsJSON decodes a policy and re-reads it as the JSON value an editor
// validates (integers as json.Number).
func tomlAsJSON(t *testing.T, src string) any {
	t.Helper()
	var tree map[string]any
	if _, err := toml.Decode(src, &tree); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSchemaAcceptsEveryExample: every shipped example (and the README's
// and docs' policies the other tests load) validates against the schema,
// and carries the #:schema comment that points editors at it.
func TestSchemaAcceptsEveryExample(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("examples/*.toml")
	if len(files) < 4 {
		t.Fatalf("examples: %v", files)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(src), "#:schema ../../docs/policy.schema.json\n") {
			t.Errorf("%s: does not start with #:schema ../../docs/policy.schema.json", f)
		}
		if err := s.Validate(tomlAsJSON(t, string(src))); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestSchemaRejects: the mistakes an editor should underline; each also
// fails to load, so the schema is no looser than the loader here.
func TestSchemaRejects(t *testing.T) {
	s := compileSchema(t)
	cases := []struct{ name, src string }{
		{"no version", "mode = \"audit\"\n"},
		{"version 2", "version = 2\n"},
		{"unknown top key", "version = 1\nmodes = \"audit\"\n"},
		{"bad mode", "version = 1\nmode = \"lax\"\n"},
		{"unknown category key", "version = 1\n[categories.git]\nhosts = [\"g.test\"]\npushh = true\n"},
		{"key of another kind", "version = 1\n[categories.registries]\nhosts = [\"r.test\"]\npush = true\n"},
		{"kind required", "version = 1\n[categories.x]\nhosts = [\"a.test\"]\n"},
		{"unknown kind", "version = 1\n[categories.x]\nkind = \"ftp\"\nhosts = [\"a.test\"]\n"},
		{"no hosts or cidrs", "version = 1\n[categories.git]\npush = false\n"},
		{"internal_api needs routes", "version = 1\n[categories.internal_api]\nhosts = [\"api.test\"]\n"},
		{"route without path", "version = 1\n[categories.internal_api]\nhosts = [\"api.test\"]\nroutes = [{ methods = [\"GET\"] }]\n"},
		{"port out of range", "version = 1\n[categories.git]\nhosts = [\"g.test\"]\nports = [0]\n"},
		{"bad rate", "version = 1\n[categories.webhooks]\nhosts = [\"h.test\"]\npaths = [\"/x\"]\nrate = \"10 per minute\"\n"},
		{"bad size", "version = 1\n[categories.webhooks]\nhosts = [\"h.test\"]\npaths = [\"/x\"]\nmax_body = \"16kb\"\n"},
		{"test without expect", "version = 1\n[[tests]]\nrequest = \"GET https://a.test/\"\n"},
		{"bad expect", "version = 1\n[[tests]]\nrequest = \"GET https://a.test/\"\nexpect = \"allowed\"\n"},
		{"inject without secret", "version = 1\n[categories.public_web]\nhosts = [\"a.test\"]\ninject = { header = \"Authorization\" }\n"},
		{"dns max_label", "version = 1\n[dns]\nmax_label = 64\n"},
	}
	for _, tc := range cases {
		if err := s.Validate(tomlAsJSON(t, tc.src)); err == nil {
			t.Errorf("%s: the schema accepts\n%s", tc.name, tc.src)
		}
		if _, err := Parse("x.toml", []byte(tc.src)); err == nil {
			t.Errorf("%s: the loader accepts it, so the schema is stricter than the language", tc.name)
		}
	}
	for _, ok := range []string{
		"version = 1\n[categories.mirror]\nkind = \"registries\"\nhosts = [\"r.test\"]\npath_prefix = \"/api/npm/x/\"\n",
		"version = 1\n[categories.git]\nkind = \"webhooks\"\nhosts = [\"h.test\"]\npaths = [\"/x\"]\nmax_body = \"16KiB\"\nrate = \"6/min\"\n",
		"version = 1\n[categories.web]\nkind = \"public_web\"\ncidrs = [\"198.18.0.0/15\"]\nports = [443, \"8000-8099\"]\n",
	} {
		if err := s.Validate(tomlAsJSON(t, ok)); err != nil {
			t.Errorf("the schema rejects a valid policy: %v\n%s", err, ok)
		}
		if _, err := Parse("x.toml", []byte(ok)); err != nil {
			t.Errorf("not a valid policy after all: %v", err)
		}
	}
}
