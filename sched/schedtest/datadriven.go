package schedtest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A scenario file is a sequence of blocks separated by blank lines. A block
// is a command line, then a "----" line, then the lines the command is
// expected to print (none when it prints nothing). Lines starting with #
// are comments and are kept as they are when the file is rewritten.
//
//	queue t1 ru1
//	----
//	verdict pending
//
// The shape follows etcd raft's rafttest and cockroachdb/datadriven; the
// code is ours and small.

// Walk runs every scenario file (*.txt) under dir, each as a subtest named
// by its path below dir without the extension ("basic_flow",
// "wide/drain"). With rewrite, each file's expected outputs are replaced
// by what the commands printed.
func Walk(t *testing.T, dir string, rewrite bool) {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".txt") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scenario files (*.txt) under %s", dir)
	}
	for _, p := range files {
		rel, _ := filepath.Rel(dir, p)
		name := strings.TrimSuffix(filepath.ToSlash(rel), ".txt")
		t.Run(name, func(t *testing.T) { RunFile(t, p, rewrite) })
	}
}

// RunFile runs one scenario file against a fresh [Script] whose harness
// checks the Core's invariants after every step. A command whose output
// differs from the expected lines is an error; a command or argument that
// does not parse stops the file (t.Fatalf, naming the line and the
// command's usage).
func RunFile(t *testing.T, path string, rewrite bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewScript()
	var out strings.Builder
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		at := fmt.Sprintf("%s:%d", path, i+1)
		var want []string
		if i+1 < len(lines) && lines[i+1] == "----" {
			for i += 2; i < len(lines) && lines[i] != ""; i++ {
				want = append(want, lines[i])
			}
		} else if i+1 < len(lines) && lines[i+1] != "" {
			t.Fatalf("%s: %q is followed by %q, want \"----\" or a blank line", at, line, lines[i+1])
		}
		got := s.Exec(t, at, line)
		fmt.Fprintf(&out, "%s\n----\n", line)
		for _, g := range got {
			out.WriteString(g + "\n")
		}
		out.WriteString("\n")
		if !rewrite && !slices.Equal(got, want) {
			t.Errorf("%s: %s\ngot:\n  %s\nwant:\n  %s", at, line, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		if i+1 < len(lines) && lines[i+1] == "" {
			i++
		}
	}
	for _, f := range s.H.Failures {
		t.Errorf("%s: invariant: %s", path, f)
	}
	if rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Fataler is the part of [testing.TB] a command needs to stop the test.
type Fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Cmd is one command line, split into positional arguments and key=value
// arguments, with readers that parse them. A reader stops the test when
// its argument does not parse; after the command ran, [Cmd.checkUsed]
// stops it when the line held an argument no reader asked for, so a typo
// in a key fails instead of being ignored.
type Cmd struct {
	Line  string
	Name  string            // the command, subcommand included: "tick", "node add"
	Pos   []string          // positional arguments after the name
	Keys  map[string]string // key=value arguments
	Order []string          // every argument token after the name, in order

	t       Fataler
	at      string // file:line
	usage   string
	usedPos []bool
	usedKey map[string]bool
}

func parseCmd(t Fataler, at, line string, skip int) *Cmd {
	f := strings.Fields(line)
	c := &Cmd{Line: line, Name: strings.Join(f[:skip], " "), Keys: map[string]string{}, Order: f[skip:],
		t: t, at: at, usedKey: map[string]bool{}}
	for _, tok := range f[skip:] {
		if k, v, ok := strings.Cut(tok, "="); ok {
			if _, dup := c.Keys[k]; dup {
				c.Fatalf("%s= given twice", k)
			}
			c.Keys[k] = v
		} else {
			c.Pos = append(c.Pos, tok)
		}
	}
	c.usedPos = make([]bool, len(c.Pos))
	return c
}

// Fatalf stops the test, naming the line and the command's usage.
func (c *Cmd) Fatalf(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("%s: %s: %s\nusage: %s", c.at, c.Line, fmt.Sprintf(format, args...), c.usage)
}

func (c *Cmd) checkUsed() {
	c.t.Helper()
	for i, u := range c.usedPos {
		if !u {
			c.Fatalf("unexpected argument %q", c.Pos[i])
		}
	}
	for _, tok := range c.Order {
		if k, _, ok := strings.Cut(tok, "="); ok && !c.usedKey[k] {
			c.Fatalf("unknown argument %s=", k)
		}
	}
}

// Tokens returns every argument token in order and marks them all read
// (for commands whose arguments depend on their order).
func (c *Cmd) Tokens() []string {
	for i := range c.usedPos {
		c.usedPos[i] = true
	}
	for k := range c.Keys {
		c.usedKey[k] = true
	}
	return c.Order
}

// Arg is positional argument i, or "" when the line has fewer.
func (c *Cmd) Arg(i int) string {
	if i < len(c.Pos) {
		c.usedPos[i] = true
		return c.Pos[i]
	}
	return ""
}

// NeedArg is positional argument i, which the line must have.
func (c *Cmd) NeedArg(i int) string {
	c.t.Helper()
	if i >= len(c.Pos) {
		c.Fatalf("missing argument %d", i+1)
	}
	return c.Arg(i)
}

// Flag reports whether the bare word w is among the positional arguments.
func (c *Cmd) Flag(w string) bool {
	for i, p := range c.Pos {
		if p == w {
			c.usedPos[i] = true
			return true
		}
	}
	return false
}

// Str is the value of key k, "" when absent.
func (c *Cmd) Str(k string) string {
	c.usedKey[k] = true
	return c.Keys[k]
}

// Has reports whether key k is given (even empty).
func (c *Cmd) Has(k string) bool {
	c.usedKey[k] = true
	_, ok := c.Keys[k]
	return ok
}

// List is key k's comma-separated values, nil when absent.
func (c *Cmd) List(k string) []string {
	if v := c.Str(k); v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

// ID reads positional argument i as an identifier such as n1 or rl12 (a
// prefix, then a number); the line must have it.
func (c *Cmd) ID(i int) uint64 {
	c.t.Helper()
	return c.parseID(c.NeedArg(i))
}

// KeyID reads key k as an identifier; absent is 0.
func (c *Cmd) KeyID(k string) uint64 {
	c.t.Helper()
	if v := c.Str(k); v != "" {
		return c.parseID(v)
	}
	return 0
}

func (c *Cmd) parseID(s string) uint64 {
	c.t.Helper()
	i := strings.IndexFunc(s, func(r rune) bool { return r >= '0' && r <= '9' })
	if i < 0 {
		c.Fatalf("identifier %q has no number", s)
	}
	v, err := strconv.ParseUint(s[i:], 10, 64)
	if err != nil {
		c.Fatalf("identifier %q: want a prefix and a number", s)
	}
	return v
}

// IDList reads key k as comma-separated identifiers; absent is none.
func IDList[T ~uint32 | ~uint64](c *Cmd, k string) []T {
	c.t.Helper()
	return parseIDs[T](c, c.Str(k))
}

// parseIDs reads s as comma-separated identifiers; "" is none.
func parseIDs[T ~uint32 | ~uint64](c *Cmd, s string) []T {
	c.t.Helper()
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f != "" {
			out = append(out, T(c.parseID(f)))
		}
	}
	return out
}

// Int reads key k as a whole number; absent is 0.
func (c *Cmd) Int(k string) int {
	c.t.Helper()
	return c.atoi(c.Str(k))
}

// IntArg reads positional argument i as a whole number; the line must
// have it.
func (c *Cmd) IntArg(i int) int {
	c.t.Helper()
	return c.atoi(c.NeedArg(i))
}

func (c *Cmd) atoi(s string) int {
	c.t.Helper()
	if s == "" {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		c.Fatalf("%q is not a whole number", s)
	}
	return v
}

// Float reads s (a key's or argument's value) as a decimal number.
func (c *Cmd) Float(s string) float64 {
	c.t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		c.Fatalf("%q is not a number", s)
	}
	return v
}

// Dur reads key k as a Go duration ("15m", "300s"); absent is 0.
func (c *Cmd) Dur(k string) time.Duration {
	c.t.Helper()
	return c.duration(c.Str(k))
}

func (c *Cmd) duration(s string) time.Duration {
	c.t.Helper()
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		c.Fatalf("%q is not a duration", s)
	}
	return d
}

// Size reads key k as a size ("16G", "512M"); absent is 0.
func (c *Cmd) Size(k string) int64 {
	c.t.Helper()
	v := c.Str(k)
	if v == "" {
		return 0
	}
	n, err := ParseSize(v)
	if err != nil {
		c.Fatalf("%q is not a size", v)
	}
	return n
}
