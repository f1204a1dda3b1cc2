package vk

import (
	"errors"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs fails for every package without a package doc comment
// (STYLE C15), and for packages named like a junk drawer.
func TestPackageDocs(t *testing.T) {
	dirs := map[string]bool{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			base := d.Name()
			if p != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dirs[filepath.Dir(p)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir := range dirs {
		// go/build picks the files the build would use (build tags
		// applied, tests excluded), which parser.ParseDir did not.
		bp, err := build.ImportDir(dir, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		switch bp.Name {
		case "common", "util", "utils", "helpers", "types", "misc":
			t.Errorf("%s: package name %q says nothing about what it provides", dir, bp.Name)
		}
		fset := token.NewFileSet()
		documented := false
		for _, name := range bp.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				t.Errorf("%s: %v", dir, err)
				continue
			}
			if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
				documented = true
			}
		}
		if !documented {
			t.Errorf("%s: package %s has no doc comment", dir, bp.Name)
		}
	}
}
