package stage

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// ANSI sequences gitlab-runner's shell writer uses.
const (
	ansiReset     = "\x1b[0;m"
	ansiBoldGreen = "\x1b[32;1m"
)

// shellEscape quotes s for bash exactly as gitlab-runner's
// helpers.ShellEscape does: literal when only [A-Za-z0-9,-./@_] appear,
// else ANSI-C quoting ($'…') with C escapes for control characters and \xNN
// for every other byte outside printable ASCII.
func shellEscape(s string) string {
	if s == "" {
		return "''"
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) * 2)
	quote := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == ',', c == '-', c == '.', c == '/', c == '@', c == '_':
			b.WriteByte(c)
		case strings.IndexByte(" !\"#$%&()*+:;<=>?[]^`{|}~", c) >= 0:
			b.WriteByte(c)
			quote = true
		default:
			quote = true
			switch c {
			case '\a':
				b.WriteString(`\a`)
			case '\b':
				b.WriteString(`\b`)
			case '\t':
				b.WriteString(`\t`)
			case '\n':
				b.WriteString(`\n`)
			case '\v':
				b.WriteString(`\v`)
			case '\f':
				b.WriteString(`\f`)
			case '\r':
				b.WriteString(`\r`)
			case '\'':
				b.WriteString(`\'`)
			case '\\':
				b.WriteString(`\\`)
			default:
				b.WriteString(`\x`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			}
		}
	}
	if quote {
		return "$'" + b.String() + "'"
	}
	return b.String()
}

// exportVar is one variable as a stage script exports it.
type exportVar struct {
	Key, Value string
	File       bool // Value is written to a file; Key holds its path
}

var validKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// scriptWriter builds the body of a stage script the way gitlab-runner's
// BashWriter does.
type scriptWriter struct {
	b       strings.Builder
	tmpDir  string // the project's .tmp directory, for file variables
	xtrace  bool
	skipped []string // keys not exported (invalid names)
}

func (w *scriptWriter) line(s string) { w.b.WriteString(s + "\n") }

// notice echoes text in bold green (gitlab-runner's Noticef).
func (w *scriptWriter) notice(text string) {
	w.line("echo " + shellEscape(ansiBoldGreen+text+ansiReset))
}

// exports writes the variables: plain ones as `export K=v`, file ones
// written under tmpDir with printf and exported as their path.
func (w *scriptWriter) exports(vars []exportVar) {
	for _, v := range vars {
		if !validKey.MatchString(v.Key) {
			w.skipped = append(w.skipped, v.Key)
			continue
		}
		if v.File {
			file := path.Join(w.tmpDir, v.Key)
			w.line(fmt.Sprintf("mkdir -p %q", w.tmpDir))
			w.line(fmt.Sprintf("printf '%%s' %s > %q", shellEscape(v.Value), file))
			w.line(fmt.Sprintf("export %s=%q", v.Key, file))
			continue
		}
		w.line("export " + v.Key + "=" + shellEscape(v.Value))
	}
}

// cd changes to dir (gitlab-runner's Cd: `cd <escaped>`).
func (w *scriptWriter) cd(dir string) { w.line("cd " + shellEscape(dir)) }

// commands writes user commands as gitlab-runner's writeCommands does: each
// trimmed command echoed in green as `$ command` (its first line plus
// "# collapsed multi-line command" when it has several), then the command
// itself; an empty command becomes an empty echo.
func (w *scriptWriter) commands(cmds ...string) {
	for _, c := range cmds {
		c = strings.TrimSpace(c)
		if c == "" {
			w.line("echo")
		} else if first, _, multi := strings.Cut(c, "\n"); multi {
			w.notice("$ " + first + " # collapsed multi-line command")
		} else {
			w.notice("$ " + c)
		}
		w.line(c)
	}
}

// finish wraps the body as gitlab-runner's BashWriter.Finish does: TERM
// makes the script exit 1, errexit and pipefail are on, noclobber off, and
// the body is eval'ed with stdin closed.
func (w *scriptWriter) finish() string {
	var b strings.Builder
	b.WriteString("#!/usr/bin/env bash\n\n")
	b.WriteString("trap exit 1 TERM\n\n")
	if w.xtrace {
		b.WriteString("set -o xtrace\n")
	}
	b.WriteString("if set -o | grep pipefail > /dev/null; then set -o pipefail; fi; set -o errexit\n")
	b.WriteString("set +o noclobber\n")
	b.WriteString(": | eval " + shellEscape(w.b.String()) + "\n")
	b.WriteString("exit 0\n")
	return b.String()
}

// expand replaces $KEY, ${KEY} and $$ in value the way gitlab-runner expands
// non-raw variables (os.Expand semantics; $$ is a literal $). Unknown keys
// expand to "".
func expand(value string, lookup func(string) (string, bool)) string {
	if !strings.Contains(value, "$") {
		return value
	}
	var b strings.Builder
	for i := 0; i < len(value); i++ {
		c := value[i]
		if c != '$' || i+1 >= len(value) {
			b.WriteByte(c)
			continue
		}
		n := value[i+1]
		switch {
		case n == '$':
			b.WriteByte('$')
			i++
		case n == '{':
			end := strings.IndexByte(value[i+2:], '}')
			if end < 0 {
				b.WriteByte(c)
				continue
			}
			v, _ := lookup(value[i+2 : i+2+end])
			b.WriteString(v)
			i += 2 + end
		case n == '_' || n >= 'a' && n <= 'z' || n >= 'A' && n <= 'Z':
			j := i + 1
			for j < len(value) && (value[j] == '_' || value[j] >= 'a' && value[j] <= 'z' ||
				value[j] >= 'A' && value[j] <= 'Z' || value[j] >= '0' && value[j] <= '9') {
				j++
			}
			v, _ := lookup(value[i+1 : j])
			b.WriteString(v)
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
