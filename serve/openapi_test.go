package serve

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"airlock/client"
)

var updateOpenAPI = flag.Bool("update-openapi", false, "rewrite docs/openapi.json from the routes")

// registeredRoutes reads every mux.Handle/HandleFunc pattern in this
// package's sources (the catch-all "/" aside). A pattern the test cannot
// evaluate fails it: the route table must stay readable.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle") || len(call.Args) != 2 {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "mux" {
				return true
			}
			p, ok := patternOf(call.Args[0])
			if !ok {
				t.Errorf("%s: a route pattern the test cannot read: write it as \"METHOD \"+v+\"/path\"", fset.Position(call.Pos()))
			}
			if p != "/" {
				out = append(out, p)
			}
			return true
		})
	}
	sort.Strings(out)
	return out
}

// patternOf evaluates "GET "+v+"/path" (v: the API version prefix).
func patternOf(e ast.Expr) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		s, err := strconv.Unquote(x.Value)
		return s, err == nil
	case *ast.Ident:
		return client.APIVersion, x.Name == "v"
	case *ast.BinaryExpr:
		l, ok1 := patternOf(x.X)
		r, ok2 := patternOf(x.Y)
		return l + r, ok1 && ok2 && x.Op == token.ADD
	}
	return "", false
}

// TestOpenAPIMatchesRoutes: every route the router serves is documented
// and has a scope, and every documented route is served by the real
// router — methods and paths, both ways.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	routes := registeredRoutes(t)
	if len(routes) < 40 {
		t.Fatalf("found only %d routes: the source scan is broken", len(routes))
	}
	mux := (&API{Backend: newFake()}).mux()
	for _, p := range routes {
		method, path, _ := strings.Cut(p, " ")
		req := httptest.NewRequest(method, strings.NewReplacer("{id}", "x1", "{exec}", "e1", "{ref}", "r1", "{name...}", "a/b").Replace(path), nil)
		if _, got := mux.Handler(req); got != p {
			t.Errorf("%s: the router serves %s %s with %q", p, method, req.URL.Path, got)
		}
	}
	if diff := cmp.Diff(routes, keys(apiOps)); diff != "" {
		t.Errorf("routes (-served +in apiOps, the OpenAPI document's source):\n%s", diff)
	}
	if diff := cmp.Diff(routes, keys(routeScopes)); diff != "" {
		t.Errorf("routes (-served +in routeScopes):\n%s", diff)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	b, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docs/openapi.json: %v", err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for m := range ops {
			documented = append(documented, strings.ToUpper(m)+" "+path)
		}
	}
	sort.Strings(documented)
	var served []string
	for _, p := range routes {
		served = append(served, openapiPath(p))
	}
	sort.Strings(served)
	if diff := cmp.Diff(served, documented); diff != "" {
		t.Errorf("routes (-served +in docs/openapi.json):\n%s", diff)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIDocIsCurrent: docs/openapi.json is what the API serves at
// /v1/openapi.json (go test ./serve -run OpenAPIDoc -update-openapi
// rewrites it).
func TestOpenAPIDocIsCurrent(t *testing.T) {
	const file = "../docs/openapi.json"
	if *updateOpenAPI {
		if err := os.WriteFile(file, OpenAPI(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, OpenAPI()) {
		t.Errorf("docs/openapi.json is stale: run go test ./serve -run OpenAPIDoc -update-openapi")
	}
	srv := httptest.NewServer((&API{Backend: newFake()}).Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Equal(got, want) {
		t.Errorf("GET /v1/openapi.json: %d, %d bytes; want docs/openapi.json", resp.StatusCode, len(got))
	}
	var doc map[string]any
	if err := json.Unmarshal(got, &doc); err != nil || doc["openapi"] != "3.1.0" {
		t.Errorf("not an OpenAPI 3.1 document: %v", err)
	}
}
