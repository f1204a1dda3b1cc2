package schedtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fatal records a Fatalf and unwinds the command, as t.Fatalf would.
type fatal struct{ msg string }

type recorder struct{}

func (recorder) Helper() {}
func (recorder) Fatalf(format string, args ...any) {
	panic(fatal{fmt.Sprintf(format, args...)})
}

// exec runs line on s and returns the message it stopped with, or "".
func exec(s *Script, line string) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			msg = f.msg
		}
	}()
	s.Exec(recorder{}, "x.txt:1", line)
	return ""
}

// An argument that does not parse, a key the command does not take, a
// missing or extra argument and an unknown command each stop the script
// with a message naming the culprit and the command's usage, instead of
// reading as 0 or being ignored.
func TestScriptArgumentsMustParse(t *testing.T) {
	for _, c := range []struct{ line, bad string }{
		{"node add n1 cpu=8x mem=16G", `"8x"`},
		{"node add nx cpu=8 mem=16G", `"nx"`},
		{"node add n1 cpu=8 mem=16Q", `"16Q"`},
		{"node add n1 cpu=8 mem=16G cores=2", `cores=`},
		{"node add n1 cpu=8 state=sleepy", `sleepy`},
		{"policy probe_limit=two", `"two"`},
		{"policy lease=9a", `"9a"`},
		{"policy pack=high", `"high"`},
		{"policy drain_hold=soon", `"soon"`},
		{"policy probes=3", `probes=`},
		{"queue t1", `missing argument 2`},
		{"poll t1 t2", `unexpected argument "t2"`},
		{"tick +5x", `"5x"`},
		{"reply n1 r1 maybe", `"maybe"`},
		{"outcome a1 fine", `"fine"`},
		{"heartbeat rl1 ru1 req=a1 fast=1", `fast=`},
		{"heartbeat rl1 req=a1", `before a runner`},
		{"frobnicate n1", `unknown command`},
		{"node add n1 cpu=1 cpu=2", `given twice`},
	} {
		msg := exec(NewScript(), c.line)
		if msg == "" {
			t.Errorf("%q ran, want it to stop the script", c.line)
			continue
		}
		if !strings.Contains(msg, c.bad) {
			t.Errorf("%q: message %q does not name %s", c.line, msg, c.bad)
		}
		if !strings.Contains(msg, "x.txt:1") {
			t.Errorf("%q: message %q does not name the line", c.line, msg)
		}
		if !strings.Contains(msg, "usage: ") && !strings.Contains(msg, "commands:") {
			t.Errorf("%q: message %q gives no usage", c.line, msg)
		}
	}
	if msg := exec(NewScript(), "node add n1 cpu=8 mem=16G pool=linux local"); msg != "" {
		t.Errorf("a well-formed line stopped: %s", msg)
	}
}

// Every command has a usage line that starts with its own name.
func TestUsageNamesCommand(t *testing.T) {
	for name, c := range commands {
		if !strings.HasPrefix(c.usage, name+" ") && c.usage != name {
			t.Errorf("%s: usage %q does not start with the command", name, c.usage)
		}
	}
}

// With rewrite the expected outputs are replaced by what the commands
// print, comments and blank lines kept, and the result then passes as it
// stands.
func TestRewrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.txt")
	src := "# a comment\nnode add n1 cpu=8 mem=32G disk=10G pool=linux\n----\nstale line\n\nreasons\n----\n"
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	RunFile(t, p, true)
	got, _ := os.ReadFile(p)
	want := "# a comment\nnode add n1 cpu=8 mem=32G disk=10G pool=linux\n----\n\nreasons\n----\n"
	if string(got) != want {
		t.Errorf("rewritten file:\n%s\nwant:\n%s", got, want)
	}
	// The rewritten file now passes as it stands.
	t.Run("rewritten passes", func(t *testing.T) { RunFile(t, p, false) })
}
