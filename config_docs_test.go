package vk

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/internal/doccheck"
	"github.com/vk-ci/vk/node"
	"github.com/vk-ci/vk/relay"
)

// configDoc says where one config file is documented: the docs whose
// reference tables (first column "key") and TOML examples describe it.
type configDoc struct {
	name string
	typ  reflect.Type
	// docs are the files of its reference; examples are "file#label"
	// (a labelled block) or "file" (every toml block of the file).
	docs, examples []string
	// elsewhere are key paths documented in another file (their subkeys
	// too), left out of the coverage check.
	elsewhere []string
}

var configDocs = []configDoc{
	{name: "hub.toml", typ: reflect.TypeFor[hub.Config](), docs: []string{"docs/hub.md"},
		examples: []string{"docs/hub.md#hub.toml", "README.md#hub.toml"}, elsewhere: []string{"capacity_policy"}},
	{name: "capacity policy", typ: reflect.TypeFor[admin.Policy](), docs: []string{"docs/capacity-policy.md"},
		examples: []string{"docs/capacity-policy.md", "docs/hub.md#capacity.toml"}},
	{name: "node.toml", typ: reflect.TypeFor[node.Config](), docs: []string{"docs/node.md"}, examples: []string{"docs/node.md"}},
	{name: "vk-gitlab.toml", typ: reflect.TypeFor[relay.Config](), docs: []string{"docs/relay.md"}, examples: []string{"docs/relay.md"}},
}

// Every key the docs' reference tables and TOML examples name exists in
// its config struct, and every key of the struct is documented.
func TestConfigKeysDocumented(t *testing.T) {
	for _, cd := range configDocs {
		t.Run(cd.name, func(t *testing.T) {
			keys := doccheck.Keys(cd.typ)
			documented := map[string]bool{"version": true}
			// Reference tables: their first column names keys; code in
			// the other cells may name subkeys ("`pool` (required)").
			for _, d := range load(t, cd.docs...) {
				for _, tb := range d.Tables() {
					if len(tb.Header) == 0 || tb.Header[0] != "key" {
						continue
					}
					for _, r := range tb.Rows {
						for i, cell := range r.Cells {
							for _, span := range doccheck.CodeIn(cell) {
								k, ok := doccheck.TableKey(span)
								if !ok {
									continue
								}
								if i == 0 && k != "version" && !keyExists(keys, k) {
									t.Errorf("%s:%d: key %q is in no field of %s", d.Path, r.Line, k, cd.typ)
								}
								documented[k] = true
							}
						}
					}
				}
			}
			// TOML examples: every key exists; what they set is documented.
			for _, ex := range cd.examples {
				file, label, _ := strings.Cut(ex, "#")
				n := 0
				for _, d := range load(t, file) {
					for _, b := range d.Blocks() {
						if b.Lang != "toml" || label != "" && b.Label != label {
							continue
						}
						n++
						var doc map[string]any
						if err := toml.Unmarshal([]byte(doccheck.Uncomment(b.Text)), &doc); err != nil {
							t.Errorf("%s:%d: example does not parse: %v", d.Path, b.Line, err)
							continue
						}
						delete(doc, "version") // a policy file's, outside admin.Policy
						for _, k := range doccheck.UnknownKeys(doc, cd.typ) {
							t.Errorf("%s:%d: example key %q is in no field of %s", d.Path, b.Line, k, cd.typ)
						}
						for _, p := range doccheck.DocPaths(doc, cd.typ) {
							documented[p] = true
						}
					}
				}
				if n == 0 {
					t.Errorf("%s: no toml example found", ex)
				}
			}
			for _, k := range keys {
				if under(k, cd.elsewhere) || documented[k] || documentedAsLeaf(k, documented) || hasDocumentedKey(k, documented) {
					continue
				}
				t.Errorf("%s key %q is documented nowhere in %v", cd.name, k, cd.docs)
			}
		})
	}
}

// keyExists: k is a key path of keys, or the tail of one (a table lists
// a table's keys under its row: `[[runners]]`, then `name`).
func keyExists(keys []string, k string) bool {
	for _, p := range keys {
		if p == k || strings.HasSuffix(p, "."+k) {
			return true
		}
	}
	return false
}

// documentedAsLeaf: a table row names k's last segments.
func documentedAsLeaf(k string, documented map[string]bool) bool {
	segs := strings.Split(k, ".")
	for i := 1; i < len(segs); i++ {
		if documented[strings.Join(segs[i:], ".")] {
			return true
		}
	}
	return false
}

// hasDocumentedKey: k is a table some of whose keys are documented.
func hasDocumentedKey(k string, documented map[string]bool) bool {
	for d := range documented {
		if strings.HasPrefix(d, k+".") {
			return true
		}
	}
	return false
}

func under(k string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return k == p || strings.HasPrefix(k, p+".") })
}

func load(t *testing.T, patterns ...string) []doccheck.Doc {
	t.Helper()
	docs, err := doccheck.Load(patterns...)
	if err != nil || len(docs) == 0 {
		t.Fatalf("load %v: %v (%d files)", patterns, err, len(docs))
	}
	return docs
}
