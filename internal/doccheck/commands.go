package doccheck

import (
	"fmt"
	"regexp"
	"strings"

	"testing"

	"github.com/spf13/cobra"
)

// Command is a command line of one program shown in a doc.
type Command struct {
	// Doc and Line say where it is shown.
	Doc  string
	Line int
	// Text is the shown form, e.g. "vk-hub nodes drain <id> [--undo]".
	Text string
	// Args are the program's arguments (the program name left out), one
	// set per alternative the shown form spells ("list|pools" gives two).
	Args [][]string
	// Partial: the form ends in "…" (only its prefix is a command) or
	// names a command without its arguments ("`vk-hub nodes drain`"), so
	// the argument count is not checked.
	Partial bool
}

// Commands returns the command lines of program prog (e.g. "vk-hub", or
// "vk node" for a subcommand tree) shown in the docs: in shell blocks
// and unlabelled blocks (one per line, after a "$ " prompt or a pipe)
// and in inline code
// spans. A span that is no command line (a log message such as
// "vk registry proxy: <reason>") is left out: it has a word ending in ':'.
func Commands(docs []Doc, prog string) []Command {
	var out []Command
	add := func(d Doc, line int, text string, output bool) {
		for _, seg := range pipeline(text, prog) {
			// Redirections are the shell's; placeholders may hold spaces.
			if i := redirectRE.FindStringIndex(seg); i != nil {
				seg = seg[:i[0]]
			}
			words := strings.Fields(placeholderRE.ReplaceAllString(seg, "<x>"))
			pw := strings.Fields(prog)
			if len(words) < len(pw) || strings.Join(words[:len(pw)], " ") != prog {
				continue
			}
			if anyWord(words, func(w string) bool { return strings.HasSuffix(w, ":") }) {
				continue
			}
			// An unlabelled block may be a program's output: a line is a
			// command line there only when a subcommand or flag follows
			// the program.
			if output && (len(words) == len(pw) || !subcommandRE.MatchString(words[len(pw)])) {
				continue
			}
			out = append(out, expand(d.Path, line, seg, words[len(pw):]))
		}
	}
	for _, d := range docs {
		for _, b := range d.Blocks() {
			if b.Lang != "sh" && b.Lang != "bash" && b.Lang != "console" && b.Lang != "" {
				continue
			}
			for i, line := range strings.Split(b.Text, "\n") {
				if c, _, ok := strings.Cut(line, " #"); ok {
					line = c
				}
				add(d, b.Line+1+i, strings.TrimPrefix(strings.TrimSpace(line), "$ "), b.Lang == "")
			}
		}
		for _, s := range d.Spans() {
			add(d, s.Line, s.Text, false)
		}
	}
	return out
}

func anyWord(ws []string, f func(string) bool) bool {
	for _, w := range ws {
		if f(w) {
			return true
		}
	}
	return false
}

// pipeline splits a shell line at its pipes (" | "), and at ";", "&&".
// A segment starting with prog's first word or a common shell program
// starts a command of its own.
// A segment that does not start with a program but follows one is an
// alternative of the previous segment's subcommand ("nodes list | pools
// <id>"): it is returned joined to that segment's leading words.
func pipeline(line, prog string) []string {
	line = strings.ReplaceAll(line, `\|`, "|")
	var segs []string
	for _, part := range regexp.MustCompile(`\s(?:\||;|&&)\s`).Split(line, -1) {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if len(segs) > 0 && !startsProgram(part, prog) {
			prev := strings.Fields(segs[len(segs)-1])
			// The alternative replaces the previous segment after its
			// program and command group ("vk-hub nodes", "vk node").
			keep := min(2, len(prev))
			segs = append(segs, strings.Join(prev[:keep], " ")+" "+part)
			continue
		}
		segs = append(segs, part)
	}
	return segs
}

var subcommandRE = regexp.MustCompile(`^(-{1,2}[a-z]|[a-z][a-z-]*[a-z](\|[a-z][a-z-]*)*$)`)

var redirectRE = regexp.MustCompile(`\s(?:[0-9]?>>?|<)\s`)

func startsProgram(s, prog string) bool {
	w, _, _ := strings.Cut(s, " ")
	if p, _, _ := strings.Cut(prog, " "); w == p {
		return true
	}
	switch w {
	case "vk", "vk-hub", "vk-gitlab", "vk-sim", "vk-bench", "ssh", "sudo", "go", "install", "systemctl", "curl", "useradd":
		return true
	}
	return false
}

// expand turns a shown form's words into argument lists: "<x>" and
// "<a|b>" are placeholders ("x"), "[…]" optional parts are included,
// "a|b" in a word gives one list per alternative, "…" ends the form.
func expand(doc string, line int, text string, words []string) Command {
	c := Command{Doc: doc, Line: line, Text: text}
	alts := [][]string{nil}
	for _, w := range words {
		if strings.Contains(w, "…") || w == "..." {
			c.Partial = true
			break
		}
		w = strings.Trim(w, "[]")
		if w == "" {
			continue
		}
		w = placeholderRE.ReplaceAllString(w, "x")
		choices := []string{w}
		if strings.Contains(w, "|") && !strings.HasPrefix(w, "-") {
			choices = strings.Split(w, "|")
		}
		var next [][]string
		for _, a := range alts {
			for _, ch := range choices {
				if ch == "" {
					continue
				}
				next = append(next, append(append([]string(nil), a...), ch))
			}
		}
		alts = next
	}
	c.Args = alts
	return c
}

// Parse checks args against root (the program's command tree) as cobra
// would before running: the subcommand exists, every flag is known and
// has its value, and, unless partial, the positional arguments are what
// the command accepts. Nothing runs.
func Parse(root *cobra.Command, args []string, partial bool) error {
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	root.InitDefaultVersionFlag()
	cmd.InitDefaultHelpFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	pos := cmd.Flags().Args()
	if cmd.HasSubCommands() && len(pos) > 0 {
		return fmt.Errorf("unknown command %q for %q", pos[0], cmd.CommandPath())
	}
	if partial || len(rest) == 0 {
		return nil // a mention of the command, not a run of it
	}
	if help, _ := cmd.Flags().GetBool("help"); help {
		return nil
	}
	if err := cmd.ValidateArgs(pos); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return nil
}

// CheckCommands fails t for every command line of prog in the files
// matching patterns that [Parse] refuses; newRoot makes a fresh command
// tree for each (cobra keeps parsed flags). Unit files (*.service) count
// their ExecStart= lines and comments as shell lines.
func CheckCommands(t testing.TB, prog string, newRoot func() *cobra.Command, patterns ...string) {
	t.Helper()
	docs, err := Load(patterns...)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range docs {
		if strings.HasSuffix(d.Path, ".service") {
			docs[i].Text = "```sh\n" + unitLines(d.Text) + "```\n"
		}
	}
	cmds := Commands(docs, prog)
	if len(cmds) == 0 {
		t.Fatalf("no %s command line found in %v", prog, patterns)
	}
	for _, c := range cmds {
		for _, args := range c.Args {
			if err := Parse(newRoot(), args, c.Partial); err != nil {
				t.Errorf("%s:%d: `%s` does not parse (%s %s): %v", c.Doc, c.Line, c.Text, prog, strings.Join(args, " "), err)
			}
		}
	}
}

// unitLines returns a unit file's ExecStart= commands and its comment
// lines, comment marks removed.
func unitLines(unit string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(unit, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "ExecStart="):
			line = strings.TrimPrefix(line, "ExecStart=")
			if f := strings.Fields(line); len(f) > 0 {
				f[0] = f[0][strings.LastIndex(f[0], "/")+1:] // /usr/local/bin/vk-hub → vk-hub
				line = strings.Join(f, " ")
			}
		case strings.HasPrefix(line, "#"):
			line = strings.TrimSpace(strings.TrimPrefix(line, "#"))
			line = strings.TrimPrefix(line, "sudo -u vk-gitlab ")
		default:
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}
