package capstantest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/testenv"
)

// TestDevServerFlags: the dev server starts with the settings of
// deploy/temporal/dynamicconfig.yaml, as capstan's own tests' servers do.
func TestDevServerFlags(t *testing.T) {
	want, err := testenv.ServerSettings()
	if err != nil {
		t.Fatal(err)
	}
	got := devServerFlags()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("devServerFlags() = %q, want %q (deploy/temporal/dynamicconfig.yaml)", got, want)
	}
}

// TestNoInternalTypeExported: no exported function, method, type, field,
// var or const of the package names a type of an internal package, and
// each carries a doc comment.
func TestNoInternalTypeExported(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		internal := map[string]bool{} // import names of internal packages
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(path, "/internal/") {
				n := path[strings.LastIndex(path, "/")+1:]
				if imp.Name != nil {
					n = imp.Name.Name
				}
				internal[n] = true
			}
		}
		check := func(what string, n ast.Node) {
			ast.Inspect(n, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] {
						t.Errorf("%s: %s names %s.%s, an internal package's", fset.Position(sel.Pos()), what, id.Name, sel.Sel.Name)
					}
				}
				return true
			})
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
					continue
				}
				if d.Doc == nil {
					t.Errorf("%s: %s has no doc comment", fset.Position(d.Pos()), d.Name.Name)
				}
				check(d.Name.Name, d.Type)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if d.Doc == nil && s.Doc == nil {
							t.Errorf("%s: %s has no doc comment", fset.Position(s.Pos()), s.Name.Name)
						}
						checkType(s.Name.Name, s.Type, check)
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								if len(fl.Names) > 0 && fl.Names[0].IsExported() && fl.Doc == nil && fl.Comment == nil {
									t.Errorf("%s: field %s.%s has no doc comment", fset.Position(fl.Pos()), s.Name.Name, fl.Names[0].Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								if d.Doc == nil && s.Doc == nil {
									t.Errorf("%s: %s has no doc comment", fset.Position(s.Pos()), n.Name)
								}
								check(n.Name, s)
							}
						}
					}
				}
			}
		}
	}
}

// checkType checks what an exported type shows: its exported fields and
// embedded types, or the whole of any other type.
func checkType(name string, typ ast.Expr, check func(string, ast.Node)) {
	st, ok := typ.(*ast.StructType)
	if !ok {
		check(name, typ)
		return
	}
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			check(name+" (embedded)", f.Type)
		}
		for _, n := range f.Names {
			if n.IsExported() {
				check(name+"."+n.Name, f.Type)
			}
		}
	}
}

func exportedRecv(r *ast.FieldList) bool {
	typ := r.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}
