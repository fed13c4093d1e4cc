package capstan_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// This file holds the public API to its promises (README, "As a library"):
// a module outside capstan can use every exported identifier of a public
// package, because none names a type it may not import; every one of them
// says what it is; and every public package shows itself in an example
// that runs.

// modulePath is capstan's module path.
const modulePath = "github.com/capstanhq/capstan"

// listedPackage is what `go list -export -json` says of one package.
type listedPackage struct {
	ImportPath string
	Name       string
	Dir        string
	Export     string
	GoFiles    []string
	Standard   bool
}

// listPackages runs `go list -export -deps` over the module and returns
// every package it names, by import path, with the module's own in order.
func listPackages(t *testing.T) (all map[string]listedPackage, own []listedPackage) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-e", "-export", "-deps", "-json=ImportPath,Name,Dir,Export,GoFiles,Standard", "./...").Output()
	if err != nil {
		t.Fatalf("go list -export -deps ./...: %v", err)
	}
	all = map[string]listedPackage{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		all[p.ImportPath] = p
		if p.ImportPath == modulePath || strings.HasPrefix(p.ImportPath, modulePath+"/") {
			own = append(own, p)
		}
	}
	slices.SortFunc(own, func(a, b listedPackage) int { return strings.Compare(a.ImportPath, b.ImportPath) })
	return all, own
}

// isInternal reports whether Go forbids importing path from outside the
// tree it sits in: a path with an "internal" element.
func isInternal(path string) bool {
	for _, elem := range strings.Split(path, "/") {
		if elem == "internal" {
			return true
		}
	}
	return false
}

// publicPackages are the module's importable library packages: neither
// internal nor a command.
func publicPackages(own []listedPackage) []listedPackage {
	var public []listedPackage
	for _, p := range own {
		if !isInternal(p.ImportPath) && p.Name != "main" && len(p.GoFiles) > 0 {
			public = append(public, p)
		}
	}
	return public
}

// TestPublicAPINamesNoInternalType type-checks every public package from
// its export data and fails on each exported function, method, field
// (embedded or not), variable, constant or type whose type names a type
// declared in an internal package: a module outside capstan could not
// write that type down, so the identifier would be half usable. An alias
// declared in an importable package (go.temporal.io/sdk/client.Client) is
// that package's name and is fine, whatever it stands for.
func TestPublicAPINamesNoInternalType(t *testing.T) {
	all, own := listPackages(t)
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		p, ok := all[path]
		if !ok || p.Export == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(p.Export)
	})
	public := publicPackages(own)
	if len(public) < 3 {
		t.Fatalf("found %d public packages; want at least capstan, tool and worker", len(public))
	}
	for _, p := range public {
		pkg, err := imp.Import(p.ImportPath)
		if err != nil {
			t.Fatalf("import %s: %v", p.ImportPath, err)
		}
		for _, finding := range internalNames(pkg) {
			t.Errorf("%s", finding)
		}
	}
}

// internalNames lists, one line each, the exported identifiers of pkg whose
// types name an internal package's type.
func internalNames(pkg *types.Package) []string {
	var found []string
	report := func(what string, typ types.Type) {
		if name := internalIn(typ, map[types.Type]bool{}); name != "" {
			found = append(found, fmt.Sprintf("%s.%s names %s", pkg.Path(), what, name))
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Func, *types.Var, *types.Const:
			report(name, obj.Type())
		case *types.TypeName:
			if obj.IsAlias() {
				report(name+" (alias)", types.Unalias(obj.Type()))
				continue
			}
			named, ok := obj.Type().(*types.Named)
			if !ok {
				continue
			}
			report(name, named.Underlying())
			for _, recv := range []types.Type{named, types.NewPointer(named)} {
				ms := types.NewMethodSet(recv)
				for i := range ms.Len() {
					m := ms.At(i).Obj()
					if m.Exported() {
						report(name+"."+m.Name(), m.Type())
					}
				}
			}
		}
	}
	return slices.Compact(found)
}

// internalIn returns the qualified name of an internal package's type that
// typ names — in a field, parameter, result, element, key, method or type
// argument — or "". It does not look inside the definition of a named type
// from another package: that type's own API is its package's concern.
func internalIn(typ types.Type, seen map[types.Type]bool) string {
	if typ == nil || seen[typ] {
		return ""
	}
	seen[typ] = true
	switch t := typ.(type) {
	case *types.Alias:
		if obj := t.Obj(); obj.Pkg() != nil && isInternal(obj.Pkg().Path()) {
			return obj.Pkg().Path() + "." + obj.Name()
		}
		return ""
	case *types.Named:
		if obj := t.Obj(); obj.Pkg() != nil && isInternal(obj.Pkg().Path()) {
			return obj.Pkg().Path() + "." + obj.Name()
		}
		for i := range t.TypeArgs().Len() {
			if n := internalIn(t.TypeArgs().At(i), seen); n != "" {
				return n
			}
		}
		return ""
	case *types.Pointer:
		return internalIn(t.Elem(), seen)
	case *types.Slice:
		return internalIn(t.Elem(), seen)
	case *types.Array:
		return internalIn(t.Elem(), seen)
	case *types.Chan:
		return internalIn(t.Elem(), seen)
	case *types.Map:
		if n := internalIn(t.Key(), seen); n != "" {
			return n
		}
		return internalIn(t.Elem(), seen)
	case *types.Signature:
		for _, tuple := range []*types.Tuple{t.Params(), t.Results()} {
			for i := range tuple.Len() {
				if n := internalIn(tuple.At(i).Type(), seen); n != "" {
					return n
				}
			}
		}
		return ""
	case *types.Struct:
		for i := range t.NumFields() {
			if f := t.Field(i); f.Exported() || f.Embedded() {
				if n := internalIn(f.Type(), seen); n != "" {
					return n
				}
			}
		}
		return ""
	case *types.Interface:
		for i := range t.NumMethods() {
			if m := t.Method(i); m.Exported() {
				if n := internalIn(m.Type(), seen); n != "" {
					return n
				}
			}
		}
		for i := range t.NumEmbeddeds() {
			if n := internalIn(t.EmbeddedType(i), seen); n != "" {
				return n
			}
		}
		return ""
	case *types.TypeParam:
		return internalIn(t.Constraint(), seen)
	case *types.Union:
		for i := range t.Len() {
			if n := internalIn(t.Term(i).Type(), seen); n != "" {
				return n
			}
		}
		return ""
	default: // *types.Basic
		return ""
	}
}

// TestPublicAPIIsDocumented parses every public package's Go files (tests
// aside) and fails on each exported identifier without a doc comment: a
// function, a type, a method of an exported type, a field or an interface
// method of one, a constant or a variable (a comment on its group counts).
// It also requires every public package that exports anything to have a
// runnable example: an Example function with an "Output:" comment.
func TestPublicAPIIsDocumented(t *testing.T) {
	_, own := listPackages(t)
	for _, p := range publicPackages(own) {
		fset := token.NewFileSet()
		exports := 0
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ParseComments)
			if err != nil {
				t.Fatalf("parse %s: %v", name, err)
			}
			for _, missing := range undocumented(fset, f) {
				t.Errorf("%s: %s has no doc comment", p.ImportPath, missing)
			}
			exports += countExports(f)
		}
		if exports > 0 && !hasRunnableExample(t, fset, p.Dir) {
			t.Errorf("%s has no runnable example (a func Example… in a _test.go file with an // Output: comment)", p.ImportPath)
		}
	}
}

// undocumented lists the exported identifiers of f that lack a doc comment,
// each as "file:line name".
func undocumented(fset *token.FileSet, f *ast.File) []string {
	var missing []string
	miss := func(pos token.Pos, name string) {
		position := fset.Position(pos)
		missing = append(missing, fmt.Sprintf("%s:%d %s", filepath.Base(position.Filename), position.Line, name))
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || (d.Recv != nil && !exportedReceiver(d.Recv)) {
				continue
			}
			if d.Doc == nil {
				miss(d.Pos(), d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					if s.Doc == nil && d.Doc == nil {
						miss(s.Pos(), s.Name.Name)
					}
					missing = append(missing, undocumentedMembers(fset, s)...)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
							miss(n.Pos(), n.Name)
						}
					}
				}
			}
		}
	}
	return missing
}

// undocumentedMembers lists the exported fields of an exported struct and
// the methods of an exported interface that lack a comment.
func undocumentedMembers(fset *token.FileSet, s *ast.TypeSpec) []string {
	var fields *ast.FieldList
	switch typ := s.Type.(type) {
	case *ast.StructType:
		fields = typ.Fields
	case *ast.InterfaceType:
		fields = typ.Methods
	default:
		return nil
	}
	var missing []string
	for _, field := range fields.List {
		if field.Doc != nil || field.Comment != nil {
			continue
		}
		for _, n := range field.Names {
			if n.IsExported() {
				position := fset.Position(n.Pos())
				missing = append(missing, fmt.Sprintf("%s:%d %s.%s", filepath.Base(position.Filename), position.Line, s.Name.Name, n.Name))
			}
		}
	}
	return missing
}

// exportedReceiver reports whether a method's receiver type is exported.
func exportedReceiver(recv *ast.FieldList) bool {
	typ := recv.List[0].Type
	for {
		switch t := typ.(type) {
		case *ast.StarExpr:
			typ = t.X
		case *ast.IndexExpr:
			typ = t.X
		case *ast.IndexListExpr:
			typ = t.X
		case *ast.Ident:
			return t.IsExported()
		default:
			return false
		}
	}
}

// countExports counts the exported top-level identifiers of f.
func countExports(f *ast.File) int {
	n := 0
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil && d.Name.IsExported() {
				n++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

// hasRunnableExample reports whether a _test.go file in dir declares an
// Example function whose body carries an "Output:" comment, so `go test`
// runs it and checks what it prints.
func hasRunnableExample(t *testing.T, fset *token.FileSet, dir string) bool {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			for _, group := range f.Comments {
				if group.Pos() > fn.Body.Lbrace && group.End() <= fn.Body.Rbrace &&
					(strings.HasPrefix(group.Text(), "Output:") || strings.HasPrefix(group.Text(), "Unordered output:")) {
					return true
				}
			}
		}
	}
	return false
}

// TestInternalNamesFindsEachKindOfIdentifier checks the checker on a
// package made in memory, so that a check that passes is known to be able
// to fail: each kind of exported identifier that names an internal type is
// reported, and one that names only importable types is not.
func TestInternalNamesFindsEachKindOfIdentifier(t *testing.T) {
	fset := token.NewFileSet()
	sources := map[string]string{
		"example.com/lib/internal/secret": `package secret
type T struct{}`,
		"example.com/lib": `package lib
import "example.com/lib/internal/secret"
type Ok struct{ N int }
func Func(secret.T) {}
type Struct struct{ Field *secret.T }
type Embeds struct{ secret.T }
type Iface interface{ Method() []secret.T }
type Alias = secret.T
var Var map[string]secret.T
func (Ok) Method() chan secret.T { return nil }
func Fine(Ok) error { return nil }
type hidden struct{ Field secret.T }`,
	}
	pkgs := map[string]*types.Package{}
	var check func(path string) (*types.Package, error)
	conf := types.Config{Importer: importerFunc(func(path string) (*types.Package, error) { return check(path) })}
	check = func(path string) (*types.Package, error) {
		if p, ok := pkgs[path]; ok {
			return p, nil
		}
		f, err := parser.ParseFile(fset, path+".go", sources[path], 0)
		if err != nil {
			return nil, err
		}
		p, err := conf.Check(path, fset, []*ast.File{f}, nil)
		pkgs[path] = p
		return p, err
	}
	lib, err := check("example.com/lib")
	if err != nil {
		t.Fatal(err)
	}
	got := internalNames(lib)
	const secret = " names example.com/lib/internal/secret.T"
	want := []string{"Alias (alias)", "Embeds", "Func", "Iface", "Iface.Method", "Ok.Method", "Struct", "Var"}
	for i, w := range want {
		want[i] = "example.com/lib." + w + secret
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("internalNames found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// importerFunc is a types.Importer made of a function.
type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
