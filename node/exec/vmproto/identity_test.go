package vmproto

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vk-ci/vk/internal/need"
)

// writeEntrypoint writes an executable sh script into dir.
func writeEntrypoint(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEntrypointRunsBeforeTheScript(t *testing.T) {
	c, _ := agentPair(t)
	bin := t.TempDir()
	execs := writeEntrypoint(t, bin, "exec-entry", "echo \"entry sees $# args, first $1\"\nexport FROM_ENTRY=yes\nexec \"$@\"\n")
	swallows := writeEntrypoint(t, bin, "swallow-entry", "echo entry only\n")
	env := []string{"PATH=" + bin + ":/usr/bin:/bin"}
	tests := []struct {
		name    string
		entry   []string
		wantOut string
		wantErr bool
	}{
		{"no entrypoint runs the shell", nil, "script FROM_ENTRY=\n", false},
		{"an entrypoint that execs its arguments runs the script in its environment", []string{execs}, "entry sees 2 args, first /bin/sh\nscript FROM_ENTRY=yes\n", false},
		{"an entrypoint named without a slash is found in the image's PATH", []string{"exec-entry"}, "entry sees 2 args, first /bin/sh\nscript FROM_ENTRY=yes\n", false},
		{"an entrypoint that does not exec its arguments never runs the script", []string{swallows}, "entry only\n", false},
		{"a missing entrypoint is a start failure", []string{"no-such-entry"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, out, _ := run(t, c, Run{Script: "echo script FROM_ENTRY=$FROM_ENTRY", Shell: []string{"/bin/sh"}, Entrypoint: tt.entry, Env: env})
			if tt.wantErr {
				if ex.Code != -1 || !strings.Contains(ex.Error, "no-such-entry") {
					t.Errorf("exit = %+v, want -1 naming the entrypoint", ex)
				}
				return
			}
			if ex.Code != 0 || out != tt.wantOut {
				t.Errorf("exit %+v, stdout %q; want 0, %q", ex, out, tt.wantOut)
			}
		})
	}
}

// agentIn serves an agent on root with scripts' files in tmp and dials it.
func agentIn(t *testing.T, root, tmp string) *Client {
	t.Helper()
	h, g := socketpair(t)
	served := make(chan error, 1)
	go func() {
		served <- Serve(g, AgentConfig{Root: root, TempDir: tmp})
		g.Close()
	}()
	c, err := Dial(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return c
}

// worldDir is a fresh directory under /tmp that another user can reach
// (t.TempDir's parents are the test user's alone).
func worldDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	d, err := os.MkdirTemp("", "vmproto-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, mode); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestScriptsRunAsTheImageUserInATreeTheyOwn(t *testing.T) {
	need.Root(t, "running a script as another user")
	root, tmp := worldDir(t, 0o755), worldDir(t, 0o1777)
	c := agentIn(t, root, tmp)
	const uid, gid, extra = 4321, 4322, 4323
	// The checkout, extracted for the job's user: it, the directories on
	// the way to it and the job tree itself are the user's.
	checkout := tarOf(t,
		&tar.Header{Name: "src/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "src/main.c", Typeflag: tar.TypeReg, Mode: 0o644, Size: 0},
		&tar.Header{Name: "src/link", Typeflag: tar.TypeSymlink, Linkname: "main.c"},
	)
	if err := c.ExtractAs(context.Background(), PathRequest{Path: "group/project", UID: uid, GID: gid}, bytes.NewReader(checkout)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".", "group", "group/project", "group/project/src", "group/project/src/main.c", "group/project/src/link"} {
		st, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != uid || s.Gid != gid {
			t.Errorf("%s is owned by %d:%d, want %d:%d", p, s.Uid, s.Gid, uid, gid)
		}
	}
	ex, out, errOut := run(t, c, Run{
		Script: "id -u; id -g; id -G; echo changed >> src/main.c && mkdir ../sibling && echo wrote",
		Shell:  []string{"/bin/sh"}, Env: []string{"PATH=/usr/bin:/bin"},
		Dir: filepath.Join(root, "group/project"), UID: uid, GID: gid, Groups: []uint32{extra},
	})
	want := "4321\n4322\n4322 4323\nwrote\n"
	if ex.Code != 0 || out != want {
		t.Errorf("exit %+v, stdout %q, stderr %q; want 0, %q", ex, out, errOut, want)
	}
	// The user's identity holds: root's files stay out of its reach.
	if err := os.WriteFile(filepath.Join(root, "roots"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ex, _, _ = run(t, c, Run{Script: "cat " + filepath.Join(root, "roots"), Shell: []string{"/bin/sh"}, Env: []string{"PATH=/usr/bin:/bin"}, UID: uid, GID: gid})
	if ex.Code == 0 {
		t.Errorf("the user's script read root's 0600 file")
	}
}

// A run with a Command (a service's main process) runs the entrypoint and
// the command as they are: no shell, no script file.
func TestCommandRunsWithoutAScript(t *testing.T) {
	c, _ := agentPair(t)
	bin := t.TempDir()
	entry := writeEntrypoint(t, bin, "svc-entry", "echo \"entry: $*\"\nexec \"$@\"\n")
	ex, out, _ := run(t, c, Run{Entrypoint: []string{entry}, Command: []string{"echo", "serving", "$HOME"}, Env: []string{"PATH=/usr/bin:/bin", "HOME=/srv"}})
	if want := "entry: echo serving $HOME\nserving $HOME\n"; ex.Code != 0 || out != want {
		t.Errorf("exit %+v, stdout %q; want 0, %q", ex, out, want)
	}
}
