package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/need"
)

const root = "../.."

// The committed docs/requirements.md is what `go run ./internal/reqdoc`
// writes for this tree: every row names the tests that cite its ID now
// (tests that exist, since they were just found), or says "not yet
// proved"; and every ID the tree names, in a citation or in prose, has a
// statement. The spec itself is not read, so the check holds in a
// checkout without ../shared.
func TestRequirementsDocCurrent(t *testing.T) {
	committed, err := os.ReadFile(filepath.Join(root, DocPath))
	if err != nil {
		t.Fatal(err)
	}
	areas, err := ReadStatements(filepath.Join(root, StatementsDir))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, a := range areas {
		for _, r := range a.Reqs {
			known[r.ID] = true
		}
	}
	tr, err := Scan(root, Codes(areas))
	if err != nil {
		t.Fatal(err)
	}
	var unknown []string
	for id, ts := range tr.Cites {
		if !known[id] {
			unknown = append(unknown, id+" cited by "+ts[0].String())
		}
	}
	for id, at := range tr.Mentions {
		if !known[id] {
			unknown = append(unknown, id+" named at "+at[0])
		}
	}
	sort.Strings(unknown)
	for _, u := range unknown {
		t.Errorf("no requirement %s in %s", u, StatementsDir)
	}
	if want := Render(areas, tr); !bytes.Equal(committed, want) {
		t.Errorf("%s is stale: run `go run ./internal/reqdoc` from the module root and commit it\n%s", DocPath, firstDiff(committed, want))
	}
}

func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  committed: " + gl + "\n  current:   " + wl
		}
	}
	return ""
}

// Citations go to the function they sit in or, outside any function, to
// the next one; a test whose body opens with t.Skip is marked skipped;
// prose mentions of known areas are found and others are not; the
// rendered file reads back to the same areas.
func TestScanAndRoundTrip(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) { writeFile(t, dir, name, src) }
	write("a/a_test.go", `package a

import "testing"

// Proves one.
//
// spec: AA-01, AA-02
func TestOne(t *testing.T) {
	t.Run("sub", func(t *testing.T) {
		// spec: AA-03
	})
}

var cases = []int{1} // spec: AA-04

// spec: AA-02
func TestLater(t *testing.T) {
	t.Skip("needs a VM")
}
`)
	write("a/a.go", "package a\n\n// Retries (AA-05); SHA-256 and BB-01 are not ours.\nfunc f() {}\n")
	write("README.md", "See AA-06.\n")
	tr, err := Scan(dir, []string{"AA"})
	if err != nil {
		t.Fatal(err)
	}
	checkCites(t, tr, map[string]string{
		"AA-01": "a.TestOne",
		"AA-02": "a.TestLater (skipped), a.TestOne",
		"AA-03": "a.TestOne",
		"AA-04": "a.TestLater (skipped)",
	})
	for _, id := range []string{"AA-01", "AA-05", "AA-06"} {
		if len(tr.Mentions[id]) == 0 {
			t.Errorf("mention of %s not found", id)
		}
	}
	if _, ok := tr.Mentions["BB-01"]; ok {
		t.Error("BB-01 of an unknown area counted as a mention")
	}

	areas := []Area{{Code: "AA", Title: "Example area", Reqs: []Req{
		{ID: "AA-01", Text: "One thing | with a pipe."}, {ID: "AA-04", Text: "Skipped only."}, {ID: "AA-07", Text: "Nobody."}}}}
	out := Render(areas, tr)
	for _, line := range []string{
		`| AA-01 | One thing \| with a pipe. | a.TestOne |`,
		`| AA-04 | Skipped only. | not yet proved; a.TestLater (skipped) |`,
		`| AA-07 | Nobody. | not yet proved |`,
	} {
		if !bytes.Contains(out, []byte(line+"\n")) {
			t.Errorf("rendered file lacks the row\n%s\n---\n%s", line, out)
		}
	}
	areas[0].Reqs[1].Quoted = true
	if out := Render(areas, tr); !bytes.Contains(out, []byte("| AA-04 | Spec's words: Skipped only. |")) {
		t.Errorf("a quoted statement is not marked as the spec's words:\n%s", out)
	}
}

// An area file reads back as it was written, quotes included; a
// statement of another area, a line that is not "ID statement", a
// missing heading and an ID stated twice are refused.
func TestStatementFiles(t *testing.T) {
	a := Area{Code: "AA", Title: "Example area", Reqs: []Req{
		{ID: "AA-01", Text: "vk does one thing."}, {ID: "AA-02", Text: "The spec's words.", Quoted: true}}}
	back, err := parseStatements("aa.txt", FormatStatements(a))
	if err != nil {
		t.Fatal(err)
	}
	if back.Code != a.Code || back.Title != a.Title || !slices.Equal(back.Reqs, a.Reqs) {
		t.Errorf("read back %+v, want %+v", back, a)
	}
	for _, bad := range []string{
		"# AA — A\nBB-01 misfiled\n",
		"# AA — A\nAA-01\n",
		"AA-01 no heading\n",
	} {
		if _, err := parseStatements("x.txt", []byte(bad)); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	dir := t.TempDir()
	for name, src := range map[string]string{"01-aa.txt": "# AA — A\nAA-01 one\n", "02-bb.txt": "# BB — B\nBB-01 x\n\n# BB again\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := ReadStatements(dir); err != nil || len(got) != 2 || got[0].Code != "AA" || got[1].Code != "BB" {
		t.Errorf("ReadStatements = %+v, %v; want areas AA then BB", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "03-cc.txt"), []byte("# AA — again\nAA-01 twice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStatements(dir); err == nil {
		t.Error("an ID stated in two files was accepted")
	}
}

// Merging the spec adds its new requirements as quotes, keeps what we
// wrote, and names what the spec no longer has.
func TestMergeSpec(t *testing.T) {
	ours := []Area{{Code: "AA", Title: "A", Reqs: []Req{{ID: "AA-01", Text: "ours"}, {ID: "AA-03", Text: "dropped"}}}}
	spec := []Area{{Code: "AA", Title: "A", Reqs: []Req{{ID: "AA-01", Text: "theirs"}, {ID: "AA-02", Text: "new"}}},
		{Code: "BB", Title: "B", Reqs: []Req{{ID: "BB-01", Text: "new area"}}}}
	merged, added, gone := MergeSpec(ours, spec)
	want := []Area{{Code: "AA", Title: "A", Reqs: []Req{{ID: "AA-01", Text: "ours"}, {ID: "AA-03", Text: "dropped"}, {ID: "AA-02", Text: "new", Quoted: true}}},
		{Code: "BB", Title: "B", Reqs: []Req{{ID: "BB-01", Text: "new area", Quoted: true}}}}
	if len(merged) != 2 || !slices.Equal(merged[0].Reqs, want[0].Reqs) || !slices.Equal(merged[1].Reqs, want[1].Reqs) {
		t.Errorf("merged %+v, want %+v", merged, want)
	}
	if !slices.Equal(added, []string{"AA-02", "BB-01"}) || !slices.Equal(gone, []string{"AA-03"}) {
		t.Errorf("added %v gone %v, want [AA-02 BB-01] and [AA-03]", added, gone)
	}
}

// With the spec beside the checkout: every requirement it lists has a
// statement, none that it lacks does, and a statement in our words is not
// the spec's sentence copied.
func TestStatementsCoverSpec(t *testing.T) {
	f, err := os.Open(filepath.Join(root, "..", "shared", "spec", "REQUIREMENTS.md"))
	if err != nil {
		need.Missingf(t, "the spec (../shared/spec/REQUIREMENTS.md beside the checkout): %v", err)
	}
	defer f.Close()
	spec, err := ParseSpec(f)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := ReadStatements(filepath.Join(root, StatementsDir))
	if err != nil {
		t.Fatal(err)
	}
	_, added, gone := MergeSpec(ours, spec)
	if len(added) > 0 || len(gone) > 0 {
		t.Errorf("the spec's requirements without a statement: %v; statements the spec lacks: %v (go run ./internal/reqdoc -spec ../shared/spec/REQUIREMENTS.md)", added, gone)
	}
	theirs := map[string]string{}
	for _, a := range spec {
		for _, r := range a.Reqs {
			theirs[r.ID] = r.Text
		}
	}
	quoted := 0
	for _, a := range ours {
		for _, r := range a.Reqs {
			if r.Quoted {
				quoted++
			} else if r.Text == theirs[r.ID] {
				t.Errorf("%s is the spec's sentence, not marked \"quote: \"", r.ID)
			}
		}
	}
	t.Logf("%d of %d statements still quote the spec", quoted, len(theirs))
}

// The spec's numbered items are read under their area headings; the
// preface and the open questions are not areas.
func TestParseSpec(t *testing.T) {
	src := `# Requirements

## Preface

- IDs are AREA-NN.

## AA — Example area

Intro text.

- AA-01 First.
- AA-02 [later] Second.

## Open questions carried from the seed (not requirements)

- AA-99 is not a requirement.
`
	areas, err := ParseSpec(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(areas) != 1 || areas[0].Code != "AA" || len(areas[0].Reqs) != 2 || areas[0].Reqs[1] != (Req{ID: "AA-02", Text: "[later] Second."}) {
		t.Errorf("ParseSpec = %+v", areas)
	}
	if _, err := ParseSpec(strings.NewReader("## AA — A\n\n- BB-01 misfiled\n")); err == nil {
		t.Error("an item under another area's heading was accepted")
	}
}

// A scenario file's "# spec:" lines go to the subtest that runs it, under
// the package's test that calls schedtest.Walk, and that subtest replaces
// the walking test itself in the list; a scenario with no walking test
// fails the scan.
func TestScanScenarios(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) { writeFile(t, dir, name, src) }
	write("s/s_test.go", `package s

import "testing"

// spec: AA-01, AA-02
func TestScripts(t *testing.T) { schedtest.Walk(t, "testdata", false) }
`)
	write("s/testdata/one.txt", "# spec: AA-01 — one proves it\n# not spec: AA-03\nnode add n1\n----\n")
	write("s/testdata/deep/two.txt", "# spec: AA-01, AA-04\n")
	tr, err := Scan(dir, []string{"AA"})
	if err != nil {
		t.Fatal(err)
	}
	checkCites(t, tr, map[string]string{
		"AA-01": "s.TestScripts/deep/two, s.TestScripts/one",
		"AA-02": "s.TestScripts",
		"AA-04": "s.TestScripts/deep/two",
	})

	write("s/s_test.go", "package s\n")
	if _, err := Scan(dir, []string{"AA"}); err == nil || !strings.Contains(err.Error(), "schedtest.Walk") {
		t.Errorf("scenarios without a walking test: err = %v, want one naming schedtest.Walk", err)
	}
}

// checkCites compares the tests that cite each ID with want (test names
// joined by ", "), and that no other ID is cited.
func checkCites(t *testing.T, tr *Tree, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for id, ts := range tr.Cites {
		var s []string
		for _, x := range ts {
			s = append(s, x.String())
		}
		got[id] = strings.Join(s, ", ")
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("cites of %s = %q, want %q", id, got[id], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("cites = %v, want only %v", got, want)
	}
}

// writeFile writes src to dir/name, making its directories.
func writeFile(t *testing.T, dir, name, src string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}
