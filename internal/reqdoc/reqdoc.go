// Command reqdoc writes docs/requirements.md: every requirement ID with
// its one-line statement and the tests that cite it (`// spec: ID`), so a
// reader finds what an ID means and what proves it without the spec
// beside them.
//
//	go run ./internal/reqdoc                 # regenerate the file
//	go run ./internal/reqdoc -spec ../shared/spec/REQUIREMENTS.md
//
// The statements are the project's own, one line per ID, in the area
// files of internal/reqdoc/statements ([StatementsDir]); the tests are
// found by scanning the tree. With -spec, requirements the spec has and
// the statement files lack are first added to them as quotes of the
// spec's wording (to be rewritten), and IDs the spec no longer has are
// listed. Run it from the module root. The package's test fails when the
// committed file differs from what this command would write, or when
// anything in the tree names an ID no statement file has.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// DocPath is the generated file, relative to the module root.
const DocPath = "docs/requirements.md"

// Area is one group of requirements, as the spec heads them.
type Area struct {
	Code  string // "ARB"
	Title string // "Capacity arbitration"
	Reqs  []Req
}

// Req is one requirement.
type Req struct {
	ID     string // "ARB-07"
	Text   string // its statement, one line
	Quoted bool   // Text is still the spec's wording, not the project's
}

// Test is a test function that cites requirements.
type Test struct {
	Dir     string // package directory relative to the root, "." for the root package
	Name    string // TestX, FuzzX, BenchmarkX, ExampleX or a helper's name
	Skipped bool   // its body opens with t.Skip: it names the ID but proves nothing yet
}

func (t Test) String() string {
	d := t.Dir
	if d == "." {
		d = "vk"
	}
	s := d + "." + t.Name
	if t.Skipped {
		s += " (skipped)"
	}
	return s
}

var (
	specHeading = regexp.MustCompile(`^## ([A-Z0-9]+) — (.+)$`)
	specItem    = regexp.MustCompile(`^- ([A-Z0-9]+-[0-9]+) (.+)$`)
	citation    = regexp.MustCompile(`spec:\s*([A-Z0-9]+-[0-9]+(?:\s*,\s*[A-Z0-9]+-[0-9]+)*)`)
	idPattern   = regexp.MustCompile(`[A-Z0-9]+-[0-9]+`)
)

// ParseSpec reads the areas and numbered items of REQUIREMENTS.md. Items
// are the lines "- AREA-NN text" under a "## AREA — Title" heading; other
// headings (the preface, the open questions) end an area.
func ParseSpec(r io.Reader) ([]Area, error) {
	var areas []Area
	var cur *Area
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			cur = nil
			if m := specHeading.FindStringSubmatch(line); m != nil {
				areas = append(areas, Area{Code: m[1], Title: m[2]})
				cur = &areas[len(areas)-1]
			}
			continue
		}
		if m := specItem.FindStringSubmatch(line); m != nil && cur != nil {
			if !strings.HasPrefix(m[1], cur.Code+"-") {
				return nil, fmt.Errorf("reqdoc: %s listed under area %s", m[1], cur.Code)
			}
			cur.Reqs = append(cur.Reqs, Req{ID: m[1], Text: strings.TrimSpace(m[2])})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(areas) == 0 {
		return nil, errors.New("reqdoc: no \"## AREA — Title\" headings in the spec")
	}
	return areas, nil
}

// Tree is what a scan of the source tree found.
type Tree struct {
	// Cites are the tests citing each ID.
	Cites map[string][]Test
	// Mentions are the places (file:line) that name an ID of a known area
	// anywhere in a Go or Markdown file, citations included.
	Mentions map[string][]string

	walkers map[string]string // package directory -> its test that calls schedtest.Walk
}

// Scan walks the module at root: the `spec:` citations in the comments of
// every _test.go file, each given to the function it sits in or, for a
// comment outside any function, to the function that follows it; the
// "# spec:" lines of scenario files (testdata/**/*.txt), each given to the
// subtest that runs the file (see [scenario]); and every mention of an ID
// of one of areas in .go and .md files (the generated file itself and
// testdata excepted).
func Scan(root string, areas []string) (*Tree, error) {
	tr := &Tree{Cites: map[string][]Test{}, Mentions: map[string][]string{}, walkers: map[string]string{}}
	mention := regexp.MustCompile(`\b(?:` + strings.Join(areas, "|") + `)-[0-9]+\b`)
	var scenarios []scenario
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (strings.HasPrefix(base, ".") || base == "vendor") {
				return filepath.SkipDir
			}
			if base == "testdata" {
				sc, err := scanScenarios(root, rel)
				scenarios = append(scenarios, sc...)
				if err != nil {
					return err
				}
				return filepath.SkipDir
			}
			return nil
		}
		if rel == filepath.FromSlash(DocPath) || !(strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".md")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, id := range mention.FindAllString(line, -1) {
				tr.Mentions[id] = append(tr.Mentions[id], fmt.Sprintf("%s:%d", filepath.ToSlash(rel), i+1))
			}
		}
		if strings.HasSuffix(p, "_test.go") {
			return scanTestFile(tr, filepath.ToSlash(filepath.Dir(rel)), p, b)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, sc := range scenarios {
		w, ok := tr.walkers[sc.dir]
		if !ok {
			return nil, fmt.Errorf("%s cites %s, but no test in %s calls schedtest.Walk to run it", sc.file, strings.Join(sc.ids, ", "), sc.dir)
		}
		for _, id := range sc.ids {
			tr.Cites[id] = append(tr.Cites[id], Test{Dir: sc.dir, Name: w + "/" + sc.name})
		}
	}
	for id, ts := range tr.Cites {
		sort.Slice(ts, func(i, j int) bool { return ts[i].String() < ts[j].String() })
		tr.Cites[id] = dropParents(slices.Compact(ts))
	}
	return tr, nil
}

// scenario is a scenario file's citations: the "# spec: ID, ..." lines of
// a testdata/**/*.txt file. They go to the subtest the package's walking
// test (the test function that calls schedtest.Walk) runs it as: its path
// below testdata without ".txt".
type scenario struct {
	dir  string // package directory, relative to the root
	file string // the file, relative to the root
	name string // its subtest name
	ids  []string
}

var scenarioCite = regexp.MustCompile(`^# spec:\s*([A-Z0-9]+-[0-9]+(?:\s*,\s*[A-Z0-9]+-[0-9]+)*)`)

func scanScenarios(root, testdata string) ([]scenario, error) {
	var out []scenario
	err := filepath.WalkDir(filepath.Join(root, testdata), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".txt") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var ids []string
		for _, line := range strings.Split(string(b), "\n") {
			if m := scenarioCite.FindStringSubmatch(line); m != nil {
				ids = append(ids, idPattern.FindAllString(m[1], -1)...)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		rel, _ := filepath.Rel(filepath.Join(root, testdata), p)
		file, _ := filepath.Rel(root, p)
		out = append(out, scenario{dir: filepath.ToSlash(filepath.Dir(testdata)), file: filepath.ToSlash(file),
			name: strings.TrimSuffix(filepath.ToSlash(rel), ".txt"), ids: ids})
		return nil
	})
	return out, err
}

// dropParents removes a test from a sorted list when one of its subtests
// is there too: the subtest names the proof more precisely.
func dropParents(ts []Test) []Test {
	return slices.DeleteFunc(ts, func(t Test) bool {
		return slices.ContainsFunc(ts, func(u Test) bool {
			return u.Dir == t.Dir && strings.HasPrefix(u.Name, t.Name+"/")
		})
	})
}

func scanTestFile(tr *Tree, dir, path string, src []byte) error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return err
	}
	var funcs []*ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
			funcs = append(funcs, fd)
			if callsWalk(fd) {
				tr.walkers[dir] = funcName(fd)
			}
		}
	}
	for _, cg := range f.Comments {
		var ids []string
		for _, c := range cg.List {
			for _, m := range citation.FindAllStringSubmatch(c.Text, -1) {
				ids = append(ids, idPattern.FindAllString(m[1], -1)...)
			}
		}
		if len(ids) == 0 {
			continue
		}
		var owner *ast.FuncDecl
		for _, fd := range funcs {
			if fd.Pos() <= cg.Pos() && cg.End() <= fd.End() || fd.Doc == cg {
				owner = fd
				break
			}
			if fd.Pos() > cg.End() {
				owner = fd
				break
			}
		}
		if owner == nil {
			return fmt.Errorf("%s: spec: %s cites from after the last function", fset.Position(cg.Pos()), strings.Join(ids, ", "))
		}
		t := Test{Dir: dir, Name: funcName(owner), Skipped: opensWithSkip(owner)}
		for _, id := range ids {
			tr.Cites[id] = append(tr.Cites[id], t)
		}
	}
	return nil
}

// callsWalk reports whether fd calls schedtest.Walk, the scenario runner.
func callsWalk(fd *ast.FuncDecl) bool {
	found := false
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Walk" {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "schedtest" {
					found = true
				}
			}
		}
		return !found
	})
	return found
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// opensWithSkip reports whether fd's first statement is an unconditional
// t.Skip, t.Skipf or t.SkipNow.
func opensWithSkip(fd *ast.FuncDecl) bool {
	if len(fd.Body.List) == 0 {
		return false
	}
	es, ok := fd.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && strings.HasPrefix(sel.Sel.Name, "Skip")
}

// Render writes the file: per area a table of ID, statement and tests.
// An ID no test cites says "not yet proved"; one cited only by skipped
// tests says so and names them.
func Render(areas []Area, tr *Tree) []byte {
	var b bytes.Buffer
	b.WriteString(`# Requirements and the tests that prove them

Each requirement of the specification, what vk does for it in one line,
and the tests that cite it (` + "`// spec: ID`" + ` above or inside the test, or
` + "`# spec: ID`" + ` in a scenario file under testdata/, named as the subtest
that runs it). A test marked
"(skipped)" opens with ` + "`t.Skip`" + `: it names the requirement but proves
nothing yet. Code comments may follow a sentence with an ID as a short
suffix, "(ARB-13)"; this file is where that ID is explained.

Generated by ` + "`go run ./internal/reqdoc`" + ` from the statements in
` + "`" + StatementsDir + "`" + ` (one file per area; a statement marked
"Spec's words:" still quotes the specification); do not edit by hand. ` + "`go test ./internal/reqdoc`" + ` fails when this file is
stale or when the tree names an ID missing here.
`)
	for _, a := range areas {
		fmt.Fprintf(&b, "\n## %s — %s\n\n| ID | Requirement | Tests |\n|---|---|---|\n", a.Code, a.Title)
		for _, r := range a.Reqs {
			text := r.Text
			if r.Quoted {
				text = "Spec's words: " + text
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", r.ID, escapeCell(text), testsCell(tr.Cites[r.ID]))
		}
	}
	return b.Bytes()
}

func testsCell(ts []Test) string {
	if len(ts) == 0 {
		return "not yet proved"
	}
	names := make([]string, len(ts))
	proved := false
	for i, t := range ts {
		names[i] = t.String()
		proved = proved || !t.Skipped
	}
	s := strings.Join(names, ", ")
	if !proved {
		s = "not yet proved; " + s
	}
	return s
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Codes returns the area codes.
func Codes(areas []Area) []string {
	var cs []string
	for _, a := range areas {
		cs = append(cs, a.Code)
	}
	return cs
}

func main() {
	spec := flag.String("spec", "", "add the requirements of this REQUIREMENTS.md that "+StatementsDir+" lacks, as quotes")
	flag.Parse()
	if err := run(*spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(spec string) error {
	areas, err := ReadStatements(StatementsDir)
	if err != nil {
		return fmt.Errorf("%w (run from the module root)", err)
	}
	if spec != "" {
		if areas, err = mergeSpecFile(areas, spec); err != nil {
			return err
		}
	}
	tr, err := Scan(".", Codes(areas))
	if err != nil {
		return err
	}
	return os.WriteFile(DocPath, Render(areas, tr), 0o644)
}

// mergeSpecFile adds the spec's new requirements to the statement files
// (see [MergeSpec]) and rewrites them.
func mergeSpecFile(areas []Area, spec string) ([]Area, error) {
	f, err := os.Open(spec)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sp, err := ParseSpec(f)
	if err != nil {
		return nil, err
	}
	merged, added, gone := MergeSpec(areas, sp)
	if len(added) > 0 {
		fmt.Fprintf(os.Stderr, "reqdoc: added as quotes of the spec, to be put in our words: %s\n", strings.Join(added, ", "))
	}
	if len(gone) > 0 {
		fmt.Fprintf(os.Stderr, "reqdoc: stated here but no longer in the spec: %s\n", strings.Join(gone, ", "))
	}
	for i, a := range merged {
		if err := os.WriteFile(filepath.Join(StatementsDir, statementFile(i, a.Code)), FormatStatements(a), 0o644); err != nil {
			return nil, err
		}
	}
	return merged, nil
}
