package capstan_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds a function in the packages where one function used to
// hold a whole protocol (ModelTurn was ~200 lines): the workflow and the
// activities read best as small steps, each testable alone.
const maxFuncLines = 80

// maxFileLines bounds any non-test Go file: a file that grows past it holds
// more than one concept and is split by concept.
const maxFileLines = 500

// TestNoLongFunctionsInWorkflowsAndActivities fails on a function of
// internal/workflows/ or internal/activities/ longer than maxFuncLines, counting from its
// signature to its closing brace.
func TestNoLongFunctionsInWorkflowsAndActivities(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"internal/workflows", "internal/activities"} {
		fset := token.NewFileSet()
		for _, path := range goFiles(t, dir) {
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
				if lines > maxFuncLines {
					t.Errorf("%s: %s is %d lines; split it below %d", fset.Position(fn.Pos()), fn.Name.Name, lines, maxFuncLines)
				}
			}
		}
	}
}

// TestNoLongFiles fails on a non-test Go file over maxFileLines.
func TestNoLongFiles(t *testing.T) {
	t.Parallel()
	for _, path := range goFiles(t, ".") {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\n")); n > maxFileLines {
			t.Errorf("%s is %d lines; split it by concept below %d", path, n, maxFileLines)
		}
	}
}

// goFiles lists the non-test Go files under root, skipping hidden
// directories and testdata.
func goFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files under %s", root)
	}
	return files
}
