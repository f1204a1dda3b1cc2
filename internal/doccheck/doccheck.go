// Package doccheck reads the operator documentation (Markdown) for what
// tests hold against the code, so the docs cannot drift from it: the
// config keys its tables and TOML examples name, the commands it shows,
// and the ports and paths it states.
//
// It parses only the Markdown the repository writes: fenced code blocks
// (```lang … ```), inline code spans and pipe tables. Tests use it; it
// has no other users.
package doccheck

import (
	"bufio"
	"encoding"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// Doc is one Markdown file.
type Doc struct {
	// Path is the file's path as given to Load.
	Path string
	// Text is its content.
	Text string
}

// quotesSpec names the docs that quote the specification's own words
// rather than describe vk, and so may name commands, keys and ports the
// code need not have. None does now: docs/requirements.md states each
// requirement in the project's words and is checked like the other docs.
var quotesSpec = []string{}

// Load reads the files named by the glob patterns, in name order, leaving
// out the docs that quote the specification ([quotesSpec]).
func Load(patterns ...string) ([]Doc, error) {
	var docs []Doc
	for _, p := range patterns {
		names, err := filepath.Glob(p)
		if err != nil {
			return nil, err
		}
		slices.Sort(names)
		for _, n := range names {
			if slices.Contains(quotesSpec, filepath.Base(n)) {
				continue
			}
			b, err := os.ReadFile(n)
			if err != nil {
				return nil, err
			}
			docs = append(docs, Doc{Path: n, Text: string(b)})
		}
	}
	return docs, nil
}

// Block is a fenced code block.
type Block struct {
	// Lang is the fence's info string ("toml", "sh", "" for none).
	Lang string
	// Text is the block's content without the fences.
	Text string
	// Line is the 1-based line of its opening fence.
	Line int
	// Label is the name of an "<!-- example: NAME -->" comment on the
	// line before the fence; "" if none.
	Label string
}

var exampleRE = regexp.MustCompile(`<!--\s*example:\s*(\S+)\s*-->`)

// Blocks returns the fenced code blocks of d, indented ones (in lists)
// included.
func (d Doc) Blocks() []Block {
	var out []Block
	var cur *Block
	var body strings.Builder
	prev := ""
	sc := bufio.NewScanner(strings.NewReader(d.Text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trim, "```"):
			cur = &Block{Lang: strings.TrimSpace(strings.TrimPrefix(trim, "```")), Line: n}
			if m := exampleRE.FindStringSubmatch(prev); m != nil {
				cur.Label = m[1]
			}
			body.Reset()
		case cur != nil && trim == "```":
			cur.Text = body.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		}
		if trim != "" {
			prev = trim
		}
	}
	return out
}

// Span is an inline code span outside code blocks.
type Span struct {
	// Text is the span's content.
	Text string
	// Line is its 1-based line.
	Line int
}

var spanRE = regexp.MustCompile("`([^`\n]+)`")

// Spans returns the inline code spans of d outside fenced blocks.
func (d Doc) Spans() []Span {
	var out []Span
	in := false
	for i, line := range strings.Split(d.Text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if in {
			continue
		}
		for _, m := range spanRE.FindAllStringSubmatch(line, -1) {
			out = append(out, Span{Text: m[1], Line: i + 1})
		}
	}
	return out
}

// Table is a pipe table.
type Table struct {
	// Header is the header row's cells.
	Header []string
	// Rows are the body rows' cells (`\|` inside a cell is a literal |).
	Rows []Row
}

// Row is one body row of a table.
type Row struct {
	Cells []string
	Line  int
}

// Tables returns the pipe tables of d outside fenced blocks.
func (d Doc) Tables() []Table {
	var out []Table
	var cur *Table
	in := false
	lines := strings.Split(d.Text, "\n")
	for i, line := range lines {
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "```") {
			in = !in
			continue
		}
		if in {
			continue
		}
		if !strings.HasPrefix(trim, "|") {
			if cur != nil {
				out = append(out, *cur)
				cur = nil
			}
			continue
		}
		cells := splitRow(trim)
		switch {
		case cur == nil && i+1 < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "|---"):
			cur = &Table{Header: cells}
		case cur != nil && strings.HasPrefix(trim, "|---"):
		case cur != nil:
			cur.Rows = append(cur.Rows, Row{Cells: cells, Line: i + 1})
		}
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out
}

func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	const bar = "\x00"
	line = strings.ReplaceAll(line, `\|`, bar)
	var cells []string
	for c := range strings.SplitSeq(line, "|") {
		cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, bar, "|")))
	}
	return cells
}

// CodeIn returns the inline code spans of a table cell.
func CodeIn(cell string) []string {
	var out []string
	for _, m := range spanRE.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// Keys returns the dotted TOML key paths of the config type t (a struct
// or a pointer to one), from its fields' `toml` tags: a nested struct is
// a table ("tls.names"), a map's keys are "*" ("tenants.*.weight"), a
// slice of structs is an array of tables ("runners.name"). A type that
// decodes itself from text (a size, a duration) is a leaf. Tables are
// listed too ("tls", "tenants.*").
func Keys(t reflect.Type) []string {
	var out []string
	walkKeys(t, "", &out)
	slices.Sort(out)
	return slices.Compact(out)
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// textLeaf reports whether t is read from one TOML string, not a table: it
// decodes itself from text and has no keys of its own. A struct that also
// reads a one-line form (hub's [store] or `store = "mem:"`) has both: its
// table's keys count.
func textLeaf(t reflect.Type) bool {
	if !reflect.PointerTo(t).Implements(textUnmarshaler) {
		return false
	}
	if t.Kind() != reflect.Struct {
		return true
	}
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("toml"), ","); f.IsExported() && name != "" && name != "-" {
			return false
		}
	}
	return true
}

func walkKeys(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if textLeaf(t) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		for f := range t.Fields() {
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "-" {
				continue
			}
			if name == "" && f.Anonymous {
				walkKeys(f.Type, prefix, out) // embedded: its keys are inline
				continue
			}
			if name == "" {
				continue
			}
			p := join(prefix, name)
			*out = append(*out, p)
			walkKeys(f.Type, p, out)
		}
	case reflect.Map:
		p := join(prefix, "*")
		*out = append(*out, p)
		walkKeys(t.Elem(), p, out)
	case reflect.Slice, reflect.Array:
		walkKeys(t.Elem(), prefix, out)
	}
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// UnknownKeys returns the keys of the decoded TOML document doc (as
// go-toml decodes into map[string]any) that the config type t has no
// field for, as dotted paths. A map field takes any key.
func UnknownKeys(doc map[string]any, t reflect.Type) []string {
	var unknown, known []string
	walkDoc(doc, t, "", "", &unknown, &known)
	slices.Sort(unknown)
	return unknown
}

// walkDoc walks the decoded document v against the config type t. key is
// the document's own dotted path (map keys as written), path the type's
// (map keys as "*", Keys' form): keys t has no field for go to unknown as
// key paths, the ones it has go to known as type paths.
func walkDoc(v any, t reflect.Type, key, path string, unknown, known *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if textLeaf(t) {
		return
	}
	switch x := v.(type) {
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for _, e := range x {
				walkDoc(e, t.Elem(), key, path, unknown, known)
			}
		}
	case map[string]any:
		switch t.Kind() {
		case reflect.Map:
			p := join(path, "*")
			*known = append(*known, p)
			for k, e := range x {
				walkDoc(e, t.Elem(), join(key, k), p, unknown, known)
			}
		case reflect.Struct:
			fields := map[string]reflect.Type{}
			collectFields(t, fields)
			for k, e := range x {
				ft, ok := fields[k]
				if !ok {
					*unknown = append(*unknown, join(key, k))
					continue
				}
				*known = append(*known, join(path, k))
				walkDoc(e, ft, join(key, k), join(path, k), unknown, known)
			}
		}
	}
}

func collectFields(t reflect.Type, into map[string]reflect.Type) {
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		switch {
		case name == "" && f.Anonymous:
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			collectFields(ft, into)
		case name != "" && name != "-":
			into[name] = f.Type
		}
	}
}

// Uncomment returns a TOML example with its commented-out settings
// ("# key = value   # why") made live, so an example that shows an
// optional key commented out is checked too.
func Uncomment(toml string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(toml, "\n") {
		t := strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(t, "# "); ok && commentedKeyRE.MatchString(rest) {
			line = rest
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

var commentedKeyRE = regexp.MustCompile(`^[a-z_][a-z0-9_]* = `)

// TableKey turns a key as a reference table writes it into a dotted
// path: "`[gitlab] url`" is "gitlab.url", "`[[runners]]`" is "runners",
// "`[tenants.<name>.projects.<id>]`" is "tenants.*.projects.*", and
// "`tls.cert`" stays. ok is false for a span that is no key (a value, a
// sentence).
func TableKey(span string) (string, bool) {
	s := strings.TrimSpace(span)
	s = placeholderRE.ReplaceAllString(s, "*")
	if rest, ok := strings.CutPrefix(s, "[["); ok {
		if i := strings.Index(rest, "]]"); i >= 0 {
			s = strings.TrimSpace(rest[:i]) + joinRest(rest[i+2:])
		}
	} else if rest, ok := strings.CutPrefix(s, "["); ok {
		if i := strings.Index(rest, "]"); i >= 0 {
			s = strings.TrimSpace(rest[:i]) + joinRest(rest[i+1:])
		}
	}
	if !keyRE.MatchString(s) {
		return "", false
	}
	return s, true
}

func joinRest(rest string) string {
	rest = strings.TrimSpace(rest)
	if rest == "" {
		return ""
	}
	return "." + rest
}

var (
	placeholderRE = regexp.MustCompile(`<[^>]+>`)
	keyRE         = regexp.MustCompile(`^[a-z_*][a-z0-9_*]*(\.[a-z_*][a-z0-9_*]*)*$`)
)

// DocPaths returns the key paths of the config type t that the decoded
// TOML document doc sets, in Keys' form (map keys as "*").
func DocPaths(doc map[string]any, t reflect.Type) []string {
	var unknown, known []string
	walkDoc(doc, t, "", "", &unknown, &known)
	slices.Sort(known)
	return slices.Compact(known)
}
