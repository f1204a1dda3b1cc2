package vmproto

import (
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// scriptCommand writes the script to file, owned by the run's user, and
// returns the command that runs it: the entrypoint (when the run has one)
// with the shell and the file as its arguments, else the shell with the
// file, in its own process group, as the run's user. Images whose
// entrypoint ends with `exec "$@"` so run their scripts the way
// gitlab-runner's Docker executor runs them in the build container.
//
// A run with a Command runs Entrypoint and Command as they are, with no
// script file.
func (a *agent) scriptCommand(r *Run, file string) (*osexec.Cmd, error) {
	asRoot := r.UID == 0 && r.GID == 0 && len(r.Groups) == 0
	argv := append(append([]string(nil), r.Entrypoint...), r.Command...)
	if len(r.Command) == 0 {
		if err := os.WriteFile(file, []byte(r.Script), 0o700); err != nil {
			return nil, err
		}
		if !asRoot {
			if err := os.Chown(file, int(r.UID), int(r.GID)); err != nil {
				return nil, err
			}
		}
		shell := r.Shell
		if len(shell) == 0 {
			shell = []string{"bash", "--noprofile", "--norc"}
		}
		argv = append(append(argv, shell...), file)
	}
	env := r.Env
	if env == nil {
		env = []string{}
	}
	prog, err := lookPathIn(argv[0], env)
	if err != nil {
		return nil, err
	}
	cmd := &osexec.Cmd{Path: prog, Args: argv, Env: env, Dir: r.Dir}
	if cmd.Dir == "" {
		cmd.Dir = a.cfg.Root
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !asRoot {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: r.UID, Gid: r.GID, Groups: r.Groups}
	}
	return cmd, nil
}

// lookPathIn finds name as the script's environment would: a name with a
// slash as it is, else the first executable file of that name in env's
// PATH (the image's), not the agent's own; the agent's only when env has
// no PATH.
func lookPathIn(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, found = v, true
		}
	}
	if !found {
		path = os.Getenv("PATH") // an environment without PATH: the agent's
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %q not found in PATH %q", osexec.ErrNotFound, name, path)
}

// owner is who an extraction's files go to; zero is root (no change).
type owner struct{ uid, gid uint32 }

func (o owner) root() bool { return o.uid == 0 && o.gid == 0 }

// chown gives name (relative to r) to the owner, the link itself for a
// symbolic link.
func (o owner) chown(r *os.Root, name string) error {
	if o.root() {
		return nil
	}
	return r.Lchown(name, int(o.uid), int(o.gid))
}

// chownPath gives rel and every directory between the root and it to the
// owner: the directories an extraction made on its way.
func (o owner) chownPath(r *os.Root, rel string) error {
	if o.root() {
		return nil
	}
	var errs []error
	for p := rel; ; p = filepath.Dir(p) {
		errs = append(errs, o.chown(r, p))
		if p == "." || p == "/" {
			break
		}
	}
	return errors.Join(errs...)
}
