package hub

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNoClosureToOwnerLoop keeps the owner loop's inputs typed: what the
// API, admin, UI and session adapters may ask of the driver is the set of
// request types (a run(*Driver) method), each a struct of plain inputs and
// answers. It fails when a closure could reach the loop again: a channel
// of the Driver carrying a function, or a request type that is a function
// or holds one.
func TestNoClosureToOwnerLoop(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	probs, n := closureProblems(files)
	for _, p := range probs {
		t.Error(p)
	}
	if n < 20 {
		t.Errorf("found %d request types, want the adapters' (20 or more): is their method still run(d *Driver)?", n)
	}
}

// TestClosureProblemsCatches shows the check above fails on each way a
// closure could come back.
func TestClosureProblemsCatches(t *testing.T) {
	const base = `package hub
type Driver struct{ in chan envelope }
type envelope struct{ req request; done chan struct{} }
type request interface{ run(d *Driver) }
type reply struct{ err error }
type okReq struct{ reply; n int; send NodeSender }
func (r *okReq) run(d *Driver) {}
func (d *Driver) other(f func()) {}
`
	for _, tc := range []struct {
		name, extra, want string
	}{
		{"clean", "", ""},
		{"func field", "type fnReq struct{ reply; f func() }; func (r *fnReq) run(d *Driver) {}", "fnReq.f holds a function"},
		{"func in a slice", "type fnReq struct{ fs []func() error }; func (r fnReq) run(d *Driver) {}", "fnReq.fs holds a function"},
		{"named func type", "type edit func(); type fnReq struct{ e edit }; func (r *fnReq) run(d *Driver) {}", "fnReq.e holds a function"},
		{"func in a nested struct", "type inner struct{ f func() }; type fnReq struct{ in inner }; func (r *fnReq) run(d *Driver) {}", "fnReq.in holds a function"},
		{"request is a func", "type fnReq func(); func (f fnReq) run(d *Driver) { f() }", "fnReq is not a struct"},
	} {
		src := base + tc.extra + "\n"
		f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		probs, _ := closureProblems([]*ast.File{f})
		got := strings.Join(probs, "; ")
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: problems %q, want one containing %q", tc.name, got, tc.want)
		}
	}
	// A Driver channel of functions.
	src := "package hub\ntype Driver struct{ reqs chan func() }\n"
	f, _ := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if probs, _ := closureProblems([]*ast.File{f}); !strings.Contains(strings.Join(probs, ";"), "Driver.reqs carries a function") {
		t.Errorf("a chan func() field of Driver: problems %q", probs)
	}
}

// closureProblems checks the package's files (see TestNoClosureToOwnerLoop)
// and returns each problem and the number of request types found.
func closureProblems(files []*ast.File) (probs []string, requests int) {
	structs := map[string]*ast.StructType{}
	funcTypes := map[string]bool{}
	reqs := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.TypeSpec:
				switch t := n.Type.(type) {
				case *ast.StructType:
					structs[n.Name.Name] = t
				case *ast.FuncType:
					funcTypes[n.Name.Name] = true
				}
			case *ast.FuncDecl:
				if n.Recv == nil || len(n.Recv.List) != 1 {
					return false
				}
				// A request's run takes the driver: run(d *Driver).
				ps := n.Type.Params.List
				if n.Name.Name == "run" && len(ps) == 1 && types.ExprString(ps[0].Type) == "*Driver" {
					reqs[strings.TrimPrefix(types.ExprString(n.Recv.List[0].Type), "*")] = true
				}
				return false
			}
			return true
		})
	}
	// holdsFunc reports whether a value of type e can hold a function:
	// a func type, a named one, or a struct of the package with a field
	// that can.
	var holdsFunc func(e ast.Expr, seen map[string]bool) bool
	holdsFunc = func(e ast.Expr, seen map[string]bool) (found bool) {
		ast.Inspect(e, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncType:
				found = true
			case *ast.Ident:
				if funcTypes[n.Name] {
					found = true
				} else if st := structs[n.Name]; st != nil && !seen[n.Name] {
					seen[n.Name] = true
					for _, fl := range st.Fields.List {
						found = found || holdsFunc(fl.Type, seen)
					}
				}
			}
			return !found
		})
		return found
	}
	if d := structs["Driver"]; d != nil {
		for _, fl := range d.Fields.List {
			if ch, ok := fl.Type.(*ast.ChanType); ok && holdsFunc(ch.Value, map[string]bool{}) {
				for _, id := range fl.Names {
					probs = append(probs, "Driver."+id.Name+" carries a function: the owner loop takes typed requests only")
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(reqs)) {
		st := structs[name]
		if st == nil {
			probs = append(probs, name+" is not a struct: a request is a struct of inputs and answers")
			continue
		}
		for _, fl := range st.Fields.List {
			for _, id := range fl.Names {
				if holdsFunc(fl.Type, map[string]bool{"reply": true}) {
					probs = append(probs, name+"."+id.Name+" holds a function: a request carries values, not code to run on the owner loop")
				}
			}
		}
	}
	return probs, len(reqs)
}
