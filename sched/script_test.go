package sched_test

import (
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vk-ci/vk/sched/schedtest"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of testdata/*.txt with what the commands print")

// TestScripts runs every scenario under testdata/ (one subtest per file,
// `go test ./sched -run TestScripts/basic_flow`). Each file opens with the
// requirements it proves ("# spec: ..."); the list below is their union,
// kept equal to it by TestScriptCitations.
//
// spec: API-13, API-17, API-22, API-23, API-24, API-26, API-27, API-28
// spec: API-29, API-34, ARB-03, ARB-04, ARB-05, ARB-06, ARB-07, ARB-08
// spec: ARB-09, ARB-10, ARB-11, ARB-12, ARB-13, ARB-14, ARB-15, ARB-16
// spec: ARB-17, ARB-18, ARB-19, ARB-20, ARB-21, ARB-22, ARB-23, ARB-24
// spec: ARB-26, ARB-27, ARB-28, ARB-32, ARB-33, ARB-34, ARB-35, ARB-36
// spec: ARB-37, ARB-38, ARB-39, ARB-40, ARB-41, ARB-42, BS-05, BS-20
// spec: BS-21, BS-22, BS-23, BS-24, BS-25, BS-28, FAIL-10, FAIL-11
// spec: FAIL-14, FAIL-15, FAIL-16, FAIL-17, FAIL-19, NSESS-24, OPS-02, PLACE-04
// spec: PLACE-05, PLACE-07, PLACE-08, PLACE-09, PLACE-11, PLACE-12, PLACE-13, PLACE-14
// spec: PLACE-15, PLACE-16, PLACE-17, PLACE-18, PLACE-19, PLACE-20, PLACE-21, PLACE-22
// spec: PLACE-24, PLACE-25
func TestScripts(t *testing.T) { schedtest.Walk(t, "testdata", *rewrite) }

var specIDs = regexp.MustCompile(`[A-Z0-9]+-[0-9]+`)

// The citations on TestScripts are exactly those the scenario files make,
// so a new file's requirements are not missed and a removed file's are not
// still claimed.
func TestScriptCitations(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "script_test.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc []string
	for _, c := range f.Comments {
		if strings.Contains(c.Text(), "TestScripts runs every scenario") {
			_, after, _ := strings.Cut(c.Text(), "spec:")
			doc = specIDs.FindAllString(after, -1)
		}
	}
	var files []string
	paths, _ := filepath.Glob("testdata/*.txt")
	more, _ := filepath.Glob("testdata/*/*.txt")
	for _, p := range append(paths, more...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		cited := false
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "# spec:"); ok {
				id, _, _ := strings.Cut(rest, "—")
				files = append(files, specIDs.FindAllString(id, -1)...)
				cited = true
			}
		}
		if !cited {
			t.Errorf("%s: no \"# spec: ID, ...\" line naming what the scenario proves", p)
		}
	}
	slices.Sort(doc)
	slices.Sort(files)
	if doc, files = slices.Compact(doc), slices.Compact(files); !slices.Equal(doc, files) {
		t.Errorf("TestScripts cites\n  %v\nthe scenario files cite\n  %v\nreplace its spec lines with:\n%s", doc, files, citationLines(files))
	}
}

// citationLines formats ids as the "// spec:" lines of TestScripts' doc
// comment, in the sorted order the check compares.
func citationLines(ids []string) string {
	var b strings.Builder
	for len(ids) > 0 {
		n := min(len(ids), 8)
		fmt.Fprintf(&b, "// spec: %s\n", strings.Join(ids[:n], ", "))
		ids = ids[n:]
	}
	return b.String()
}
