package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// StatementsDir holds the requirement statements, relative to the module
// root: one file per area, named NN-area.txt so that the areas keep the
// spec's order.
const StatementsDir = "internal/reqdoc/statements"

// quotePrefix starts a statement that still quotes the spec instead of
// saying, in the project's words, what vk does.
const quotePrefix = "quote: "

var (
	areaHeading   = regexp.MustCompile(`^# ([A-Z0-9]+) — (.+)$`)
	statementLine = regexp.MustCompile(`^([A-Z0-9]+-[0-9]+) (.+)$`)
)

// ReadStatements reads every area file of dir, in name order. A file is a
// heading "# AREA — Title", comment lines starting with #, blank lines,
// and one line per requirement: its ID, a space and its statement; a
// statement starting with "quote: " is the spec's own wording.
func ReadStatements(dir string) ([]Area, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("reqdoc: no statement files (*.txt) in %s", dir)
	}
	slices.Sort(names)
	var areas []Area
	seen := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		a, err := parseStatements(filepath.ToSlash(n), b)
		if err != nil {
			return nil, err
		}
		for _, r := range a.Reqs {
			if at, dup := seen[r.ID]; dup {
				return nil, fmt.Errorf("reqdoc: %s: %s is stated in %s too", n, r.ID, at)
			}
			seen[r.ID] = n
		}
		areas = append(areas, a)
	}
	return areas, nil
}

func parseStatements(name string, b []byte) (Area, error) {
	var a Area
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for i := 1; sc.Scan(); i++ {
		line := sc.Text()
		switch {
		case a.Code == "":
			m := areaHeading.FindStringSubmatch(line)
			if m == nil {
				return a, fmt.Errorf("reqdoc: %s:%d: want the heading \"# AREA — Title\" first", name, i)
			}
			a.Code, a.Title = m[1], m[2]
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
		default:
			m := statementLine.FindStringSubmatch(line)
			if m == nil {
				return a, fmt.Errorf("reqdoc: %s:%d: want \"ID statement\"", name, i)
			}
			if !strings.HasPrefix(m[1], a.Code+"-") {
				return a, fmt.Errorf("reqdoc: %s:%d: %s is not of area %s", name, i, m[1], a.Code)
			}
			r := Req{ID: m[1], Text: strings.TrimSpace(m[2])}
			if t, ok := strings.CutPrefix(r.Text, quotePrefix); ok {
				r.Text, r.Quoted = strings.TrimSpace(t), true
			}
			a.Reqs = append(a.Reqs, r)
		}
	}
	if a.Code == "" {
		return a, fmt.Errorf("reqdoc: %s is empty", name)
	}
	return a, sc.Err()
}

// FormatStatements writes an area's file.
func FormatStatements(a Area) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s — %s\n", a.Code, a.Title)
	b.WriteString(`#
# One line per requirement: its ID, then what vk does, in the project's
# own words. A line whose statement starts with "quote: " still quotes the
# spec and is to be rewritten. docs/requirements.md is generated from these
# files: go run ./internal/reqdoc

`)
	for _, r := range a.Reqs {
		t := r.Text
		if r.Quoted {
			t = quotePrefix + t
		}
		fmt.Fprintf(&b, "%s %s\n", r.ID, t)
	}
	return b.Bytes()
}

// statementFile is the name of the i-th area's file.
func statementFile(i int, code string) string {
	return fmt.Sprintf("%02d-%s.txt", i+1, strings.ToLower(code))
}

// MergeSpec adds to areas, as quotes, every requirement of spec they lack
// (and any area they lack, after the others), and lists what it added and
// the IDs areas state that spec no longer has.
func MergeSpec(areas, spec []Area) (merged []Area, added, gone []string) {
	inSpec := map[string]bool{}
	for _, sa := range spec {
		for _, r := range sa.Reqs {
			inSpec[r.ID] = true
		}
	}
	merged = slices.Clone(areas)
	for _, sa := range spec {
		i := slices.IndexFunc(merged, func(a Area) bool { return a.Code == sa.Code })
		if i < 0 {
			merged = append(merged, Area{Code: sa.Code, Title: sa.Title})
			i = len(merged) - 1
		}
		a := &merged[i]
		a.Reqs = slices.Clone(a.Reqs)
		for _, r := range sa.Reqs {
			if !slices.ContainsFunc(a.Reqs, func(x Req) bool { return x.ID == r.ID }) {
				a.Reqs = append(a.Reqs, Req{ID: r.ID, Text: r.Text, Quoted: true})
				added = append(added, r.ID)
			}
		}
	}
	for _, a := range merged {
		for _, r := range a.Reqs {
			if !inSpec[r.ID] {
				gone = append(gone, r.ID)
			}
		}
	}
	return merged, added, gone
}
