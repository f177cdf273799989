package audit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// topNames returns the exported top-level names the non-test Go files of
// dir declare.
func topNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	for n := range names {
		if !ast.IsExported(n) {
			delete(names, n)
		}
	}
	return names
}

// Every name of the event schema is audit's too (aliases.go), so code
// keeps writing audit.Event, audit.KindExec, audit.Query.
func TestAliasesCoverSchema(t *testing.T) {
	schema, audit := topNames(t, "schema"), topNames(t, ".")
	if !schema["Event"] || !schema["KindExec"] || !schema["Query"] {
		t.Fatalf("schema declares %d names, not Event, KindExec and Query: the files read are not the schema's", len(schema))
	}
	for n := range schema {
		if !audit[n] {
			t.Errorf("audit/schema declares %s and audit does not: add it to audit/aliases.go", n)
		}
	}
}
