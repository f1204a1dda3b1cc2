package vmproto

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vk-ci/vk/internal/testlog"
)

// socketpair returns the two ends of a Unix stream socket pair, the same
// kind of byte stream a vsock or virtio-serial port gives.
func socketpair(t *testing.T) (host, guest *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Non-blocking, so the os.File is pollable and Close wakes a
	// blocked Read, as with a real socket.
	for _, fd := range fds {
		if err := unix.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
	}
	return os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "guest")
}

// agentPair serves an agent on a job tree in a temp dir and dials it.
func agentPair(t *testing.T) (*Client, string) {
	t.Helper()
	root := t.TempDir()
	h, g := socketpair(t)
	served := make(chan error, 1)
	go func() {
		served <- Serve(g, AgentConfig{Root: root, TempDir: t.TempDir()})
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
	return c, root
}

func run(t *testing.T, c *Client, r Run) (Exit, string, string) {
	t.Helper()
	var out, errb testlog.Buffer
	p, err := c.Start(r, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := p.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ex, out.String(), errb.String()
}

func TestRunKeepsStreamsApartAndReportsExit(t *testing.T) {
	c, root := agentPair(t)
	tests := []struct {
		name           string
		run            Run
		code           int
		stdout, stderr string
	}{
		{"two streams and a status", Run{Script: "echo out; echo err >&2; exit 3"}, 3, "out\n", "err\n"},
		{"environment and directory", Run{Script: "echo \"$FOO\"; pwd", Env: []string{"FOO=bar"}, Dir: "/"}, 0, "bar\n/\n", ""},
		{"job tree is the default directory", Run{Script: "pwd"}, 0, root + "\n", ""},
		{"only the given environment", Run{Script: "echo \"${HOME-unset}\""}, 0, "unset\n", ""},
		{"a shell other than bash", Run{Script: "echo $0", Shell: []string{"sh"}}, 0, "", ""},
		{"large output", Run{Script: "head -c 200000 /dev/zero | tr '\\0' a"}, 0, strings.Repeat("a", 200000), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, out, errs := run(t, c, tt.run)
			if ex.Code != tt.code || ex.Signal != "" || ex.Error != "" {
				t.Errorf("exit = %+v, want code %d", ex, tt.code)
			}
			if tt.name == "a shell other than bash" {
				if !strings.HasSuffix(out, ".sh\n") {
					t.Errorf("stdout = %q, want the script file's name", out)
				}
				return
			}
			if out != tt.stdout || errs != tt.stderr {
				t.Errorf("stdout, stderr = %q, %q; want %q, %q", out, errs, tt.stdout, tt.stderr)
			}
		})
	}
}

// spec: STAGE-04
func TestStagesShareTheGuest(t *testing.T) {
	c, _ := agentPair(t)
	if ex, _, _ := run(t, c, Run{Script: "echo built > artefact"}); ex.Code != 0 {
		t.Fatalf("first stage: %+v", ex)
	}
	ex, out, _ := run(t, c, Run{Script: "cat artefact"})
	if ex.Code != 0 || out != "built\n" {
		t.Errorf("second stage: %+v %q, want the first stage's file", ex, out)
	}
}

func TestStartFailureIsReported(t *testing.T) {
	c, _ := agentPair(t)
	ex, _, _ := run(t, c, Run{Script: "true", Shell: []string{"/no/such/shell"}})
	if ex.Code != -1 || ex.Error == "" {
		t.Errorf("exit = %+v, want -1 with the start error", ex)
	}
}

func TestCancel(t *testing.T) {
	c, _ := agentPair(t)
	tests := []struct {
		name   string
		sig    syscall.Signal
		script string
		code   int
		signal string
		out    string
	}{
		{"graceful runs the script's trap", syscall.SIGTERM, "trap 'echo term; exit 7' TERM; echo ready; while :; do sleep 0.1; done", 7, "", "ready\nterm\n"},
		{"immediate kills", syscall.SIGKILL, "echo ready; sleep 100", -1, "killed", "ready\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := testlog.Watching("ready\n")
			p, err := c.Start(Run{Script: tt.script}, out, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			<-out.Seen()
			if err := p.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			ex, err := p.Wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if ex.Code != tt.code || ex.Signal != tt.signal {
				t.Errorf("exit = %+v, want code %d signal %q", ex, tt.code, tt.signal)
			}
			if got := out.String(); got != tt.out {
				t.Errorf("stdout = %q, want %q", got, tt.out)
			}
		})
	}
}

func TestWaitContextKillsTheScript(t *testing.T) {
	c, _ := agentPair(t)
	out := testlog.Watching("ready\n")
	p, err := c.Start(Run{Script: "echo ready; sleep 100"}, out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	<-out.Seen()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ex, err := p.Wait(ctx)
	if err != nil || ex.Signal != "killed" {
		t.Errorf("Wait = %+v, %v; want killed", ex, err)
	}
}

func TestScriptEndsWithoutItsBackgroundProcesses(t *testing.T) {
	c, root := agentPair(t)
	// The background sleep holds stdout open; the step still ends when
	// the script does, and the sleep is killed with it.
	ex, _, _ := run(t, c, Run{Script: "sleep 100 & echo $! > bg.pid; exit 0"})
	if ex.Code != 0 {
		t.Fatalf("exit = %+v", ex)
	}
	b, err := os.ReadFile(filepath.Join(root, "bg.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// SIGKILL went to the script's process group before the exit was
	// sent; the kernel finishes the kill asynchronously, so wait (bounded)
	// for the process to be gone or a zombie.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("background process %d still runs: %s", pid, st)
		}
		time.Sleep(10 * time.Millisecond) // polling another process's death
	}
}

func writeTree(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "sub", "deep"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "sub", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "sub", "deep", "b"), bytes.Repeat([]byte("b"), 100000), 0o600))
	must(os.Symlink("../a.txt", filepath.Join(dir, "sub", "link")))
}

// spec: XFER-24
func TestArchiveAndExtractRoundTrip(t *testing.T) {
	c, root := agentPair(t)
	writeTree(t, filepath.Join(root, "out"))
	var tarball bytes.Buffer
	if err := c.Archive(context.Background(), "out", &tarball); err != nil {
		t.Fatal(err)
	}
	if err := c.Extract(context.Background(), "copy/here", bytes.NewReader(tarball.Bytes())); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{"a.txt", 0o644}, {"sub/run.sh", 0o755}, {"sub/deep/b", 0o600}} {
		want, _ := os.ReadFile(filepath.Join(root, "out", f.name))
		got, err := os.ReadFile(filepath.Join(root, "copy/here", f.name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want %d bytes", f.name, len(got), err, len(want))
		}
		if st, err := os.Stat(filepath.Join(root, "copy/here", f.name)); err == nil && st.Mode().Perm() != f.mode {
			t.Errorf("%s: mode %v, want %v", f.name, st.Mode().Perm(), f.mode)
		}
	}
	if l, err := os.Readlink(filepath.Join(root, "copy/here/sub/link")); err != nil || l != "../a.txt" {
		t.Errorf("link = %q, %v; want ../a.txt", l, err)
	}
	// A single file archives under its own name.
	tarball.Reset()
	if err := c.Archive(context.Background(), "out/a.txt", &tarball); err != nil {
		t.Fatal(err)
	}
	h, err := tar.NewReader(&tarball).Next()
	if err != nil || h.Name != "a.txt" {
		t.Errorf("single file entry = %v, %v", h, err)
	}
}

// An archive narrowed with Only holds the entries on or below those
// paths and the directories above them, never follows a symbolic link
// on the way, and adds nothing for a path the tree does not hold.
func TestArchiveOnly(t *testing.T) {
	c, root := agentPair(t)
	writeTree(t, filepath.Join(root, "out"))
	if err := os.Symlink("sub", filepath.Join(root, "out", "lnkdir")); err != nil {
		t.Fatal(err)
	}
	names := func(only []string) ([]string, error) {
		var tarball bytes.Buffer
		if err := c.ArchiveOnly(context.Background(), "out", only, &tarball); err != nil {
			return nil, err
		}
		var out []string
		tr := tar.NewReader(&tarball)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return out, nil
			}
			if err != nil {
				return nil, err
			}
			out = append(out, h.Name)
		}
	}
	for _, tc := range []struct {
		only []string
		want []string
	}{
		{[]string{"sub/deep", "missing/x"}, []string{"sub/", "sub/deep/", "sub/deep/b"}},
		{[]string{"sub/run.sh", "a.txt"}, []string{"a.txt", "sub/", "sub/run.sh"}},
		{[]string{"lnkdir/run.sh"}, []string{"lnkdir"}}, // the link, not what it points at
		{[]string{"sub/deep", "."}, []string{"a.txt", "lnkdir", "sub/", "sub/deep/", "sub/deep/b", "sub/link", "sub/run.sh"}},
	} {
		got, err := names(tc.only)
		if err != nil {
			t.Fatalf("only %q: %v", tc.only, err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("only %q: entries %q, want %q", tc.only, got, tc.want)
		}
	}
	if _, err := names([]string{"../etc"}); err == nil || !strings.Contains(err.Error(), "outside the job tree") {
		t.Errorf("only ../etc: %v, want a refusal naming the job tree", err)
	}
}

func tarOf(t *testing.T, entries ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(make([]byte, h.Size))
		}
	}
	tw.Close()
	return b.Bytes()
}

func TestTreeStaysInsideTheJobTree(t *testing.T) {
	c, root := agentPair(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range []string{"../x", "/etc", "a/../../x", "escape"} {
		if err := c.Archive(ctx, p, io.Discard); err == nil && p != "escape" {
			t.Errorf("Archive(%q) succeeded", p)
		}
	}
	// Archiving through the job's symlink does not read outside.
	var b bytes.Buffer
	_ = c.Archive(ctx, "escape/secret", &b)
	if bytes.Contains(b.Bytes(), []byte("s\x00")) || b.Len() > 0 && strings.Contains(b.String(), "secret") {
		t.Errorf("archive read a file outside the job tree")
	}
	bad := map[string][]byte{
		"dot-dot name":      tarOf(t, &tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}),
		"through a symlink": tarOf(t, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside}, &tar.Header{Name: "l/evil", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}),
		"a device":          tarOf(t, &tar.Header{Name: "dev", Typeflag: tar.TypeChar, Mode: 0o644}),
		"not a tar at all":  bytes.Repeat([]byte("x"), 1024),
	}
	for name, tb := range bad {
		t.Run(name, func(t *testing.T) {
			if err := c.Extract(ctx, "in", bytes.NewReader(tb)); err == nil {
				t.Errorf("Extract succeeded")
			}
			if _, err := os.Stat(filepath.Join(outside, "evil")); err == nil {
				t.Errorf("a file was written outside the job tree")
			}
		})
	}
	if err := c.Extract(ctx, "../up", bytes.NewReader(tarOf(t))); err == nil {
		t.Errorf("Extract to ../up succeeded")
	}
	// The connection survives refused requests.
	if ex, out, _ := run(t, c, Run{Script: "echo still"}); ex.Code != 0 || out != "still\n" {
		t.Errorf("after refusals: %+v %q", ex, out)
	}
}

func TestVersionMismatchIsRefused(t *testing.T) {
	h, g := socketpair(t)
	defer h.Close()
	served := make(chan error, 1)
	go func() { served <- Serve(g, AgentConfig{Root: t.TempDir()}); g.Close() }()
	h.Write(AppendFrame(nil, Control(KindHello, 0, Hello{Version: Version + 1})))
	f, err := ReadFrame(h)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := Decode(f)
	if hl, ok := msg.(*Hello); !ok || hl.Error == "" {
		t.Errorf("agent answered %+v, want a hello with an error", msg)
	}
	if err := <-served; !errors.Is(err, ErrVersion) {
		t.Errorf("Serve = %v, want ErrVersion", err)
	}
}

// fakeGuest answers the hello, then sends frames, standing for a guest
// the job took over.
func fakeGuest(t *testing.T, g *os.File, frames ...Frame) {
	t.Helper()
	if _, err := ReadFrame(g); err != nil {
		t.Error(err)
		return
	}
	g.Write(AppendFrame(nil, Control(KindHello, 0, Hello{Version: Version})))
	if _, err := ReadFrame(g); err != nil { // the host's run
		t.Error(err)
		return
	}
	for _, f := range frames {
		g.Write(AppendFrame(nil, f))
	}
}

func TestHostRefusesAMisbehavingGuest(t *testing.T) {
	tests := map[string][]Frame{
		"a stream the host did not open": {{Kind: KindStdout, Stream: 99, Payload: []byte("x")}},
		"a host-only kind":               {{Kind: KindRun, Stream: 1, Payload: []byte(`{}`)}},
		"control that is not JSON":       {{Kind: KindExit, Stream: 1, Payload: []byte("{")}},
		"an end on a script's stream":    {{Kind: KindEnd, Stream: 1, Payload: []byte(`{}`)}},
		"an unknown kind":                {{Kind: 200, Stream: 1}},
		"an oversized frame":             {{Kind: KindStdout, Stream: 1, Payload: make([]byte, MaxPayload+1)}},
	}
	for name, frames := range tests {
		t.Run(name, func(t *testing.T) {
			h, g := socketpair(t)
			defer g.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				fakeGuest(t, g, frames...)
			}()
			c, err := Dial(h)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			p, err := c.Start(Run{Script: "true"}, io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Wait(context.Background()); !errors.Is(err, ErrClosed) {
				t.Errorf("Wait = %v, want ErrClosed", err)
			}
			<-done
		})
	}
}
