package sched_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// TestDeps: sched is pure: stdlib plus tidwall/btree, and nothing that does
// I/O, reads a clock, logs, or knows the wire (STYLE C1, DESIGN).
func TestDeps(t *testing.T) {
	const pkg = "github.com/vk-ci/vk/sched"
	deptest.StdlibOnly(t, pkg, "github.com/tidwall/btree")
	deptest.Forbid(t, pkg, "os", "os/exec", "net", "net/http", "log", "log/slog", "io/fs",
		"math/rand", "github.com/vk-ci/vk/proto/", "github.com/vk-ci/vk/internal/clock")
}

// TestSourcePurity walks the non-test sources: no wall clock, no timers, no
// goroutines, no global PRNG.
func TestSourcePurity(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	forbidden := map[string]bool{"Now": true, "Since": true, "Until": true, "After": true,
		"AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true, "Sleep": true}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		timeName := ""
		for _, imp := range file.Imports {
			if imp.Path.Value == `"time"` {
				timeName = "time"
				if imp.Name != nil {
					timeName = imp.Name.Name
				}
			}
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement in sched", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == timeName && forbidden[n.Sel.Name] {
					t.Errorf("%s: time.%s in sched", fset.Position(n.Pos()), n.Sel.Name)
				}
			}
			return true
		})
	}
	if checked < 5 {
		t.Fatalf("checked only %d files; run from the package directory", checked)
	}
}

// TestExportedDocs: every exported identifier of sched and schedtest has a
// doc comment (STYLE C15).
func TestExportedDocs(t *testing.T) {
	for _, dir := range []string{".", "schedtest"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range file.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Name.IsExported() && d.Doc == nil && !isMethodOfUnexported(d) && !isSealMethod(d) && d.Name.Name != "String" {
						t.Errorf("%s: %s has no doc comment", fset.Position(d.Pos()), d.Name.Name)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() && d.Doc == nil && s.Doc == nil {
								t.Errorf("%s: type %s has no doc comment", fset.Position(s.Pos()), s.Name.Name)
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() && d.Doc == nil && s.Doc == nil && s.Comment == nil {
									t.Errorf("%s: %s has no doc comment", fset.Position(n.Pos()), n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
}

func isMethodOfUnexported(d *ast.FuncDecl) bool {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return false
	}
	typ := d.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && !id.IsExported()
}

// isSealMethod: the unexported seal methods and String of the closed sets
// are documented on their interfaces.
func isSealMethod(d *ast.FuncDecl) bool { return d.Recv != nil && !d.Name.IsExported() }
