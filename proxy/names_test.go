package proxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCloseReasonsDocumented: docs/events.md lists exactly the values
// of flow.close_reason, flow.mode and flow.handling the proxy declares,
// and no function of the package makes a close reason from a string
// literal (a typo would otherwise be a new, undocumented value).
func TestCloseReasonsDocumented(t *testing.T) {
	files := parsePackage(t)
	doc, err := os.ReadFile("../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	for typ, field := range map[string]string{"closeReason": "flow.close_reason", "flowMode": "flow.mode", "handling": "flow.handling"} {
		declared := constantsOf(files, typ)
		documented := documentedValues(t, string(doc), field)
		slices.Sort(declared)
		slices.Sort(documented)
		if !slices.Equal(declared, documented) {
			t.Errorf("%s: the code declares %q, docs/events.md lists %q", field, declared, documented)
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			checkLiteralUse(t, n)
			fn, ok := n.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				return true
			}
			checkReturns(t, fn.Type, fn.Body, fn.Name.Name)
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if fl, ok := n.(*ast.FuncLit); ok {
					checkReturns(t, fl.Type, fl.Body, fn.Name.Name+" (func literal)")
				}
				return true
			})
			return true
		})
	}
}

func parsePackage(t *testing.T) []*ast.File {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	fset := token.NewFileSet()
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// constantsOf returns the values of the string constants declared with
// the named type.
func constantsOf(files []*ast.File, typ string) []string {
	var out []string
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						out = append(out, s)
					}
				}
			}
		}
	}
	return out
}

// documentedValues returns the backquoted values in the meaning column
// of field's row, each the first word of its list item.
func documentedValues(t *testing.T, doc, field string) []string {
	t.Helper()
	var row string
	for line := range strings.SplitSeq(doc, "\n") {
		if strings.HasPrefix(line, "| `"+field+"` |") {
			row = line
		}
	}
	if row == "" {
		t.Fatalf("docs/events.md has no row for %s", field)
	}
	meaning := row[strings.LastIndex(strings.TrimSuffix(row, " |"), " | ")+3:]
	var out []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(meaning, -1) {
		out = append(out, m[1])
	}
	return out
}

// checkLiteralUse fails for a string literal passed to emitClose or
// set as a flow's mode or handling.
func checkLiteralUse(t *testing.T, n ast.Node) {
	t.Helper()
	isLit := func(e ast.Expr) bool {
		lit, ok := e.(*ast.BasicLit)
		return ok && lit.Kind == token.STRING
	}
	field := func(e ast.Expr) string {
		switch e := e.(type) {
		case *ast.SelectorExpr:
			return e.Sel.Name
		case *ast.Ident:
			return e.Name
		}
		return ""
	}
	switch n := n.(type) {
	case *ast.CallExpr:
		if field(n.Fun) == "emitClose" && len(n.Args) == 2 && isLit(n.Args[1]) {
			t.Errorf("emitClose with the literal close reason %s", n.Args[1].(*ast.BasicLit).Value)
		}
	case *ast.AssignStmt:
		for i, l := range n.Lhs {
			if f := field(l); (f == "mode" || f == "handling") && i < len(n.Rhs) && isLit(n.Rhs[i]) {
				t.Errorf("a flow's %s set to the literal %s", f, n.Rhs[i].(*ast.BasicLit).Value)
			}
		}
	case *ast.KeyValueExpr:
		if f := field(n.Key); (f == "mode" || f == "handling") && isLit(n.Value) {
			t.Errorf("a flow's %s set to the literal %s", f, n.Value.(*ast.BasicLit).Value)
		}
	}
}

// checkReturns fails for a string literal other than "" returned where
// the function's result is a closeReason.
func checkReturns(t *testing.T, ft *ast.FuncType, body *ast.BlockStmt, name string) {
	t.Helper()
	var at []int
	if ft.Results != nil {
		i := 0
		for _, r := range ft.Results.List {
			k := max(1, len(r.Names))
			if id, ok := r.Type.(*ast.Ident); ok && id.Name == "closeReason" {
				for j := range k {
					at = append(at, i+j)
				}
			}
			i += k
		}
	}
	if len(at) == 0 {
		return
	}
	ast.Inspect(body, func(n ast.Node) bool {
		if _, ok := n.(*ast.FuncLit); ok {
			return false // checked on its own
		}
		ret, ok := n.(*ast.ReturnStmt)
		if !ok {
			return true
		}
		for _, i := range at {
			if i >= len(ret.Results) {
				continue
			}
			if lit, ok := ret.Results[i].(*ast.BasicLit); ok && lit.Kind == token.STRING && lit.Value != `""` {
				t.Errorf("%s returns the close reason %s as a literal: declare it as a closeReason constant and document it", name, lit.Value)
			}
		}
		return true
	})
}
