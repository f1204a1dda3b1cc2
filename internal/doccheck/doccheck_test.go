package doccheck

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/cobra"
)

func tree() *cobra.Command {
	root := &cobra.Command{Use: "tool"}
	grp := &cobra.Command{Use: "nodes", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }}
	run := func(*cobra.Command, []string) error { return nil }
	drain := &cobra.Command{Use: "drain <id>", Args: cobra.ExactArgs(1), RunE: run}
	drain.Flags().Bool("undo", false, "")
	list := &cobra.Command{Use: "list", Args: cobra.NoArgs, RunE: run}
	grp.AddCommand(drain, list)
	serve := &cobra.Command{Use: "serve", Args: cobra.NoArgs, RunE: run}
	serve.Flags().String("config", "", "")
	root.AddCommand(grp, serve)
	return root
}

func TestCommandsParse(t *testing.T) {
	doc := Doc{Path: "x.md", Text: "Run `tool serve --config /etc/x.toml` or `tool nodes list|drain`,\n" +
		"`tool nodes drain`, `tool nodes drain x [--undo]`, `tool nodes undrian x`,\n" +
		"`tool serve --bogus`, `tool nodes drain a b`, `tool nodes list | drain <node id>`, `tool nodes …`,\n" +
		"`tool registry: a log line`\n\n```sh\n$ tool serve --config c.toml > out.log   # comment\nother | tool nodes list\n```\n"}
	type res struct {
		args string
		ok   bool
	}
	var got []res
	for _, c := range Commands([]Doc{doc}, "tool") {
		for _, a := range c.Args {
			got = append(got, res{strings.Join(a, " "), Parse(tree(), a, c.Partial) == nil})
		}
	}
	want := []res{
		{"serve --config c.toml", true},
		{"nodes list", true},
		{"serve --config /etc/x.toml", true},
		{"nodes list", true},
		{"nodes drain", true},
		{"nodes drain", true}, // a mention
		{"nodes drain x --undo", true},
		{"nodes undrian x", false},
		{"serve --bogus", false},
		{"nodes drain a b", false},
		{"nodes list", true},
		{"nodes drain x", true},
		{"nodes", true}, // partial
	}
	if !slices.Equal(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

type cfg struct {
	Version int    `toml:"version"`
	Addr    string `toml:"addr"`
	TLS     struct {
		Names []string `toml:"names"`
	} `toml:"tls"`
	Tenants map[string]tenant `toml:"tenants"`
	Runners []struct {
		Name string `toml:"name"`
	} `toml:"runners"`
	Embedded
}

type Embedded struct {
	Extra int `toml:"extra"`
}

type tenant struct {
	Weight int `toml:"weight"`
}

func TestKeysAndUnknownKeys(t *testing.T) {
	want := []string{"addr", "extra", "runners", "runners.name", "tenants", "tenants.*", "tenants.*.weight", "tls", "tls.names", "version"}
	if got := Keys(reflect.TypeFor[cfg]()); !slices.Equal(got, want) {
		t.Errorf("Keys = %v, want %v", got, want)
	}
	var doc map[string]any
	src := Uncomment("version = 1\n# addr = \"x\"   # why\nbogus = 2\n[tls]\nnames = []\nnmes = []\n[tenants.a]\nweight = 1\nwieght = 2\n[[runners]]\nname = \"r\"\n")
	if err := toml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	if got := UnknownKeys(doc, reflect.TypeFor[cfg]()); !slices.Equal(got, []string{"bogus", "tenants.a.wieght", "tls.nmes"}) {
		t.Errorf("UnknownKeys = %v", got)
	}
}

func TestTableKey(t *testing.T) {
	for in, want := range map[string]string{
		"tls.cert": "tls.cert", "[gitlab] url": "gitlab.url", "[[runners]]": "runners",
		"[tenants.<name>.projects.<id>]": "tenants.*.projects.*", "weight": "weight", "ui.addr": "ui.addr",
	} {
		if got, ok := TableKey(in); !ok || got != want {
			t.Errorf("TableKey(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"127.0.0.1:8443", "/var/lib/vk-hub", "\"default\"", "1, 60", "mem=2G"} {
		if got, ok := TableKey(in); ok {
			t.Errorf("TableKey(%q) = %q, want no key", in, got)
		}
	}
}
