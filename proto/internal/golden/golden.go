// Package golden pins the JSON encoding of protocol types in
// proto/*/testdata/*.json (PROTO-01, STYLE C5).
//
// The canonical form of a golden file is the compact wire encoding (what
// json.Marshal or a frame encoder writes) re-indented by json.Indent with
// two spaces, plus a trailing newline. Keys appear in struct field order;
// omitted fields are absent. Run `go test ./proto/... -update` to rewrite
// the files from the Go values in the tests, then review the diff.
package golden

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata from the test values")

// Canonical returns wire re-indented in the golden-file form.
func Canonical(wire []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Indent(&buf, wire, "", "  "); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// Check pins v's encoding in testdata/<name>.json:
//  1. enc(v), made canonical, equals the file (or rewrites it with -update);
//  2. dec(file) equals v (cmp.Diff), and re-encoding it gives the file
//     byte for byte;
//  3. dec of the file with an unknown field added to every JSON object
//     still equals v (unknown fields are ignored).
func Check[T any](t *testing.T, name string, v T, enc func(T) ([]byte, error), dec func([]byte) (T, error)) {
	t.Helper()
	path := filepath.Join("testdata", name+".json")
	wire, err := enc(v)
	if err != nil {
		t.Fatalf("encode %s: %v", name, err)
	}
	got, err := Canonical(wire)
	if err != nil {
		t.Fatalf("canonical %s: %v", name, err)
	}
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding of %s differs from %s:\n%s", name, path, cmp.Diff(string(want), string(got)))
	}
	back, err := dec(want)
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if d := cmp.Diff(v, back); d != "" {
		t.Fatalf("decode(%s) differs from the value (-want +got):\n%s", path, d)
	}
	wire2, err := enc(back)
	if err != nil {
		t.Fatalf("re-encode %s: %v", name, err)
	}
	again, err := Canonical(wire2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, want) {
		t.Fatalf("decode→encode of %s is not byte-equal:\n%s", path, cmp.Diff(string(want), string(again)))
	}
	var tree any
	if err := json.Unmarshal(want, &tree); err != nil {
		t.Fatal(err)
	}
	addUnknown(tree)
	extra, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	lenient, err := dec(extra)
	if err != nil {
		t.Fatalf("decode %s with unknown fields: %v", path, err)
	}
	if d := cmp.Diff(v, lenient); d != "" {
		t.Fatalf("unknown fields changed the decoding of %s (-want +got):\n%s", path, d)
	}
}

// addUnknown adds a field no type defines to every object in tree.
func addUnknown(tree any) {
	switch n := tree.(type) {
	case map[string]any:
		for _, c := range n {
			addUnknown(c)
		}
		n["zz_unknown_field"] = map[string]any{"n": 1.5, "s": []any{"x"}}
	case []any:
		for _, c := range n {
			addUnknown(c)
		}
	}
}

// JSON returns the encode and decode functions of plain JSON bodies.
func JSON[T any]() (func(T) ([]byte, error), func([]byte) (T, error)) {
	return func(v T) ([]byte, error) { return json.Marshal(v) },
		func(b []byte) (T, error) {
			var v T
			err := json.Unmarshal(b, &v)
			return v, err
		}
}
