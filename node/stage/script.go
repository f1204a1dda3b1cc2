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
	ansiClear     = "\x1b[0K"
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

// posixShellEscape quotes s as gitlab-runner's helpers.PosixShellEscape
// does (its bash shell's quoting with FF_POSIXLY_CORRECT_ESCAPES, for
// shells without ANSI-C quoting): two single quotes when empty; in double quotes when
// one of ` " \ $ (each backslash-escaped) or of  !#%&()*<=>?[| (kept)
// appears; else literal. Every other byte, control characters and
// non-ASCII included, stays as it is.
func posixShellEscape(s string) string {
	if s == "" {
		return "''"
	}
	var b strings.Builder
	b.Grow(len(s) * 2)
	quote := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case strings.IndexByte("`\"\\$", c) >= 0:
			b.WriteByte('\\')
			b.WriteByte(c)
			quote = true
		case strings.IndexByte(" !#%&()*<=>?[|", c) >= 0:
			b.WriteByte(c)
			quote = true
		default:
			b.WriteByte(c)
		}
	}
	if quote {
		return `"` + b.String() + `"`
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
	b      strings.Builder
	tmpDir string // the project's .tmp directory, for file variables
	xtrace bool
	// scriptSections wraps each multi-line command in its own collapsed
	// section (FF_SCRIPT_SECTIONS with trace sections on).
	scriptSections bool
	// checkErrors exits with a command's status after each one
	// (FF_ENABLE_BASH_EXIT_CODE_CHECK).
	checkErrors bool
	// legacyEval runs the body as ": | eval '…'" (FF_USE_LEGACY_BASH_EVAL)
	// instead of in a subshell with stdin closed.
	legacyEval bool
	// posixEscape quotes as POSIX shells read it, in double quotes, not
	// in bash's $'…' (FF_POSIXLY_CORRECT_ESCAPES).
	posixEscape bool
	skipped     []string // keys not exported (invalid names)
}

func (w *scriptWriter) line(s string) { w.b.WriteString(s + "\n") }

// escape quotes s as gitlab-runner's BashWriter.escape does: ShellEscape,
// or PosixShellEscape with FF_POSIXLY_CORRECT_ESCAPES.
func (w *scriptWriter) escape(s string) string {
	if w.posixEscape {
		return posixShellEscape(s)
	}
	return shellEscape(s)
}

// notice echoes text in bold green (gitlab-runner's Noticef).
func (w *scriptWriter) notice(text string) {
	w.line("echo " + w.escape(ansiBoldGreen+text+ansiReset))
}

// gitlabEnvFile is the dotenv file behind GITLAB_ENV, in tmpDir
// (gitlab-runner's gitlab_runner_env).
const gitlabEnvFile = "gitlab_runner_env"

// exports writes the variables as gitlab-runner's exportVariables does:
// plain ones as `export K=v`, file ones written under tmpDir with printf
// and exported as their path; then GITLAB_ENV, the file a stage appends
// KEY=value lines to, and the lines earlier stages appended, exported.
func (w *scriptWriter) exports(vars []exportVar) {
	defer func() {
		env := path.Join(w.tmpDir, gitlabEnvFile)
		w.line("export GITLAB_ENV=" + w.escape(env))
		w.line(fmt.Sprintf("mkdir -p %q", w.tmpDir))
		w.line(fmt.Sprintf("touch %q", env))
		w.line(fmt.Sprintf(`while read -r line; do export "$line"; done < %q`, env))
	}()
	for _, v := range vars {
		if !validKey.MatchString(v.Key) {
			w.skipped = append(w.skipped, v.Key)
			continue
		}
		if v.File {
			file := path.Join(w.tmpDir, v.Key)
			w.line(fmt.Sprintf("mkdir -p %q", w.tmpDir))
			w.line(fmt.Sprintf("printf '%%s' %s > %q", w.escape(v.Value), file))
			w.line(fmt.Sprintf("export %s=%q", v.Key, file))
			continue
		}
		w.line("export " + v.Key + "=" + w.escape(v.Value))
	}
}

// cd changes to dir (gitlab-runner's Cd: `cd <escaped>`, a Command, so
// followed by the exit-status check when checkErrors).
func (w *scriptWriter) cd(dir string) {
	w.line("cd " + w.escape(dir))
	w.check()
}

// command writes a command as gitlab-runner's Command does: the command
// and each argument escaped, then the exit-status check when checkErrors.
func (w *scriptWriter) command(name string, args ...string) {
	parts := []string{w.escape(name)}
	for _, a := range args {
		parts = append(parts, w.escape(a))
	}
	w.line(strings.Join(parts, " "))
	w.check()
}

// rmDir removes a directory as gitlab-runner's RmDir does: made writable
// first when it exists, then `rm -r -f "<path>"`, each a command followed
// by the exit-status check when checkErrors.
func (w *scriptWriter) rmDir(dir string) {
	w.line(`if [ -d "` + dir + `" ]; then`)
	w.line(`  chmod -R u+rwX "` + dir + `"`)
	if w.checkErrors {
		w.line("  _runner_exit_code=$?; if [ $_runner_exit_code -ne 0 ]; then exit $_runner_exit_code; fi")
	}
	w.line("fi")
	w.line(`rm -r -f "` + dir + `"`)
	w.check()
}

// rmFile removes a file (gitlab-runner's RmFile: `rm -f "<path>"`, a
// command, so followed by the exit-status check when checkErrors).
func (w *scriptWriter) rmFile(file string) {
	w.line(fmt.Sprintf("rm -f %q", file))
	w.check()
}

// check writes gitlab-runner's exit-status check (CheckForErrors) when
// FF_ENABLE_BASH_EXIT_CODE_CHECK is on.
func (w *scriptWriter) check() {
	if w.checkErrors {
		w.line("_runner_exit_code=$?; if [ $_runner_exit_code -ne 0 ]; then exit $_runner_exit_code; fi")
	}
}

// commands writes user commands as gitlab-runner's writeCommands does: each
// trimmed command echoed in green as `$ command` (its first line plus
// "# collapsed multi-line command" when it has several, or, with script
// sections, the whole command as the title of its own collapsed section
// section_<prefix>_<index>), then the command itself; an empty command
// becomes an empty echo. With checkErrors each command is followed by an
// exit on its status.
func (w *scriptWriter) commands(prefix string, cmds ...string) {
	for i, c := range cmds {
		c = strings.TrimSpace(c)
		first, _, multi := strings.Cut(c, "\n")
		switch {
		case c == "":
			w.line("echo")
		case multi && w.scriptSections:
			id := fmt.Sprintf("%s_%d", prefix, i)
			w.line("printf '%b\\n' section_start:$(awk 'BEGIN{srand(); print srand()}'):section_" + id +
				"[hide_duration=true,collapsed=true]\r" + ansiClear + w.escape(ansiBoldGreen+"$ "+c+ansiReset))
			w.line("printf '%b\\n' section_end:$(awk 'BEGIN{srand(); print srand()}'):section_" + id + "\r" + ansiClear)
		case multi:
			w.notice("$ " + first + " # collapsed multi-line command")
		default:
			w.notice("$ " + c)
		}
		w.line(c)
		w.check()
	}
}

// finish wraps the body as gitlab-runner 19.3's BashWriter.Finish does: a
// TERM trap that exits 1 (in the outer shell and again in the subshell,
// whose traps start reset), pipefail when the shell has it, errexit,
// noclobber off, and the body eval'ed in a subshell with stdin closed (or
// piped from ':' with FF_USE_LEGACY_BASH_EVAL).
func (w *scriptWriter) finish() string {
	const trap = "trap 'exit 1' TERM"
	var b strings.Builder
	b.WriteString("#!/usr/bin/env bash\n\n")
	b.WriteString(trap + "\n\n")
	if w.xtrace {
		b.WriteString("set -o xtrace\n")
	}
	b.WriteString(`case "$(set -o)" in *"pipefail"*) set -o pipefail;; esac; set -o errexit` + "\n")
	b.WriteString("set +o noclobber\n")
	if w.legacyEval {
		b.WriteString(": | eval " + w.escape(w.b.String()) + "\n")
	} else {
		b.WriteString("(" + trap + "; eval " + w.escape(w.b.String()) + ") < /dev/null\n")
	}
	b.WriteString("exit 0\n")
	return b.String()
}
