package main

import (
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"testing"

	"github.com/vk-ci/vk/node/exec/vmproto"
)

// pipes joins the agent's stdout (read) and stdin (write) into the one
// stream the host side takes.
type pipes struct {
	io.Reader
	io.WriteCloser
}

func (p pipes) Close() error { return p.WriteCloser.Close() }

// The agent builds as a static binary (the guest has no libc to load)
// and serves the protocol: stages in one agent share the job tree, and an
// archive comes back from it.
func TestStaticAgentServesTheProtocol(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "vk-agent")
	build := osexec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("vk-agent is dynamically linked (%v)", p.Type)
		}
	}
	f.Close()

	root := t.TempDir()
	cmd := osexec.Command(bin, "-stdio", "-root", root)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var agentErr bytes.Buffer
	cmd.Stderr = &agentErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := vmproto.Dial(pipes{out, in})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, script := range []string{"mkdir -p out && echo one > out/f", "cat out/f; echo two >&2; exit 4"} {
		var so, se bytes.Buffer
		p, err := c.Start(vmproto.Run{Script: script}, &so, &se)
		if err != nil {
			t.Fatal(err)
		}
		ex, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 && (ex.Code != 4 || so.String() != "one\n" || se.String() != "two\n") {
			t.Errorf("second stage: %+v %q %q", ex, so.String(), se.String())
		}
	}
	var tarball bytes.Buffer
	if err := c.Archive(ctx, "out", &tarball); err != nil || !bytes.Contains(tarball.Bytes(), []byte("one\n")) {
		t.Errorf("archive: %v, %d bytes", err, tarball.Len())
	}
	c.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("agent: %v\n%s", err, agentErr.String())
	}
}
