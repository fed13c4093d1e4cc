package workflows

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestChangesListsEvery: Changes names every change id version.go
// declares, each once, so `starter versions` reports on all of them.
func TestChangesListsEvery(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "version.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "change") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
					id, _ := strconv.Unquote(lit.Value)
					declared[id] = true
				}
			}
		}
	}
	listed := map[string]bool{}
	for _, c := range Changes {
		if listed[c.ID] {
			t.Errorf("Changes lists %q twice", c.ID)
		}
		listed[c.ID] = true
		if !declared[c.ID] {
			t.Errorf("Changes lists %q, which version.go does not declare", c.ID)
		}
	}
	for id := range declared {
		if !listed[id] {
			t.Errorf("version.go declares change %q, which Changes does not list", id)
		}
	}
}
