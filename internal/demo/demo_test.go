package demo

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/deptest"
	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/node/exec/oci"
)

// TestDemoRuns runs `vk demo` as a new user would and checks what it
// promises: every job ends as expected, a summary, the traces written.
//
// spec: RELAY-12, FAIL-02, NODE-09
func TestDemoRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes up to a minute")
	}
	for _, b := range []string{"git", "bash"} {
		if _, err := exec.LookPath(b); err != nil {
			need.Binary(t, b, b)
		}
	}
	// --hub-addr: the hub listens where it is told.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hubAddr := ln.Addr().String()
	ln.Close()
	var out bytes.Buffer
	start := time.Now()
	// Without --containers the host's container support is never asked
	// about: a failing check must not matter.
	checked := false
	// --dir names a directory that does not exist yet: it is made, and
	// the fleet's state is kept there (fleet.log too: no Log given).
	dir := filepath.Join(t.TempDir(), "new", "demo")
	err = Run(t.Context(), Options{Dir: dir, HubAddr: hubAddr,
		containersCheck: func() error { checked = true; return ErrNoContainers }}, &out)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "fleet.log"))
		t.Fatalf("Run: %v\nfleet.log:\n%s", err, b)
	}
	for _, kept := range []string{"fleet", "fleet.log", "traces"} {
		if _, err := os.Stat(filepath.Join(dir, kept)); err != nil {
			t.Errorf("--dir given: %s not kept: %v", kept, err)
		}
	}
	// Not a terminal: the traces shown carry no escape sequences.
	if i := strings.IndexAny(out.String(), "\x1b\r"); i >= 0 {
		t.Errorf("escape or CR in the output at %d: %q", i, out.String()[max(i-40, 0):min(i+40, out.Len())])
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the demo took %v, want under a minute", d)
	}
	for _, want := range []string{"hub     https://" + hubAddr + " ", "JOB", "TENANT", "RESULT", "failed (script_failure)", "Traces", "All 20 jobs ended as expected"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if checked {
		t.Error("the demo without --containers checked the host for containers")
	}
	// Without --containers nothing of them shows.
	for _, unwanted := range []string{"demo image", ImageJob, "executor auto"} {
		if strings.Contains(out.String(), unwanted) {
			t.Errorf("the demo without --containers printed %q", unwanted)
		}
	}
}

// TestDemoRunsContainers runs `vk demo --containers`: the nodes run
// executor auto, the demo image is built and pushed to the fleet's
// registry, and ImageJob runs in it with its service, reached by alias;
// the other jobs run on the host as without the flag.
//
// spec: SPEC-13, STAGE-01, FAIL-01
func TestDemoRunsContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes up to a minute")
	}
	if err := ContainersAvailable(); err != nil {
		need.Missingf(t, "containers cannot run here: %v", err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		need.Binary(t, "git", "git")
	}
	dir := t.TempDir()
	var out bytes.Buffer
	err := Run(t.Context(), Options{Dir: dir, Log: testlog.New(t), Containers: true}, &out)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	text := out.String()
	for _, want := range []string{
		"building the demo image (busybox + bash) and pushing it to the fleet's registry…",
		"/" + ImageRepoTag + "  ",
		"executor auto",
		"All 21 jobs ended as expected",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The summary lists it, with a node, as a success.
	row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(ImageJob) + ` #[0-9]+ +web +test +node-[12] .* success$`)
	if !row.MatchString(text) {
		t.Errorf("the summary has no successful row for %s", ImageJob)
	}
	traces, _ := filepath.Glob(filepath.Join(dir, "traces", "web", "*-test_in-image.log"))
	if len(traces) != 1 {
		t.Fatalf("traces of %s: %v, want one", ImageJob, traces)
	}
	b, err := os.ReadFile(traces[0])
	if err != nil {
		t.Fatal(err)
	}
	trace := regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]").ReplaceAllString(string(b), "")
	for _, want := range []string{
		"Using the oci executor with bash...",
		"inside the image: " + ImageMarker + "\n",
		"from the " + ImageService + " service: " + ServedText + "\n",
		"hello, from a container\n", // the build's artifact, run in the image
		"Job succeeded",
	} {
		if !strings.Contains(trace, want) {
			t.Errorf("%s trace lacks %q:\n%s", ImageJob, want, trace)
		}
	}
	if strings.Contains(trace, "probably didn't start properly") {
		t.Errorf("the service failed its health check:\n%s", trace)
	}
	// The other jobs still ran on the host.
	others, _ := filepath.Glob(filepath.Join(dir, "traces", "web", "*-lint.log"))
	if len(others) != 1 {
		t.Fatalf("lint traces: %v", others)
	}
	if b, _ := os.ReadFile(others[0]); !strings.Contains(string(b), "Using the process executor") {
		t.Errorf("lint did not run on the host:\n%s", b)
	}
}

// `vk demo --containers` on a host lacking a part fails at once, before
// creating anything, with ErrNoContainers naming the part and the
// apt-get line.
func TestDemoContainersFailFast(t *testing.T) {
	dir := t.TempDir()
	probe := presentProbe()
	probe.stat = func(p string) error {
		if p == ocitest.Busybox {
			return os.ErrNotExist
		}
		return nil
	}
	var out bytes.Buffer
	start := time.Now()
	err := Run(t.Context(), Options{Dir: dir, Containers: true, containersCheck: func() error { return checkContainers(probe) }}, &out)
	if !errors.Is(err, ErrNoContainers) {
		t.Fatalf("Run = %v, want ErrNoContainers", err)
	}
	for _, want := range []string{"busybox-static", ocitest.Busybox, "apt-get install -y busybox-static"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("failing took %v", d)
	}
	if out.Len() != 0 {
		t.Errorf("Run printed before failing:\n%s", out.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("Run created %v before failing", ents)
	}
}

// presentProbe is a host with every part --containers needs.
func presentProbe() hostProbe {
	return hostProbe{
		oci:      func() error { return nil },
		stat:     func(string) error { return nil },
		lookPath: func(f string) (string, error) { return "/usr/bin/" + f, nil },
	}
}

// Each missing part is named, with its package on the apt-get line when
// one installs it; a complete host passes.
func TestCheckContainers(t *testing.T) {
	notRoot := fmt.Errorf("%w: not running as root", oci.ErrUnavailable)
	for _, tc := range []struct {
		name     string
		probe    func(*hostProbe)
		want     []string // in the message
		wantPkgs string   // the install line's packages; "" none
	}{
		{name: "complete", probe: func(*hostProbe) {}},
		{name: "not root", probe: func(p *hostProbe) { p.oci = func() error { return notRoot } },
			want: []string{"not running as root", "needs root"}},
		{name: "no runc", probe: func(p *hostProbe) {
			p.oci = func() error {
				return fmt.Errorf("%w: exec: \"runc\": executable file not found in $PATH", oci.ErrUnavailable)
			}
			p.lookPath = func(f string) (string, error) {
				if f == "runc" {
					return "", exec.ErrNotFound
				}
				return f, nil
			}
		}, want: []string{"runc"}, wantPkgs: "runc"},
		{name: "not root and no runc", probe: func(p *hostProbe) {
			p.oci = func() error { return notRoot }
			p.lookPath = func(f string) (string, error) {
				if f == "runc" {
					return "", exec.ErrNotFound
				}
				return f, nil
			}
		}, want: []string{"not running as root", "runc: not found in PATH"}, wantPkgs: "runc"},
		{name: "no busybox", probe: func(p *hostProbe) {
			p.stat = func(f string) error {
				if f == ocitest.Busybox {
					return os.ErrNotExist
				}
				return nil
			}
		}, want: []string{"busybox-static: " + ocitest.Busybox}, wantPkgs: "busybox-static"},
		{name: "no registry", probe: func(p *hostProbe) {
			p.stat = func(f string) error {
				if f == testfleet.RegistryBinary {
					return os.ErrNotExist
				}
				return nil
			}
		}, want: []string{"docker-registry: " + testfleet.RegistryBinary}, wantPkgs: "docker-registry"},
		{name: "nothing", probe: func(p *hostProbe) {
			p.oci = func() error { return notRoot }
			p.stat = func(string) error { return os.ErrNotExist }
			p.lookPath = func(string) (string, error) { return "", exec.ErrNotFound }
		}, want: []string{"not running as root", "runc", "busybox-static", "docker-registry", "bash"},
			wantPkgs: "runc busybox-static docker-registry bash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := presentProbe()
			tc.probe(&p)
			err := checkContainers(p)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("checkContainers = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrNoContainers) {
				t.Fatalf("checkContainers = %v, want ErrNoContainers", err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q:\n%s", w, msg)
				}
			}
			if !strings.Contains(msg, ContainerPackages) {
				t.Errorf("message lacks the full apt-get line:\n%s", msg)
			}
			install := regexp.MustCompile(`install: apt-get install -y (.*)`).FindStringSubmatch(msg)
			switch {
			case tc.wantPkgs == "" && install != nil:
				t.Errorf("install line %q for a part no package provides", install[0])
			case tc.wantPkgs != "" && (install == nil || install[1] != tc.wantPkgs):
				t.Errorf("install line %v, want packages %q:\n%s", install, tc.wantPkgs, msg)
			}
		})
	}
}

// The demo (and so cmd/vk) does not link "testing": ocitest's wrappers
// take its own TB.
func TestDemoDoesNotLinkTesting(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/internal/demo", "testing")
}

// TestCommandFlags pins `vk demo`'s flags and their defaults.
func TestCommandFlags(t *testing.T) {
	c := Command()
	if c.Use != "demo" {
		t.Errorf("Use = %q, want demo", c.Use)
	}
	for _, tc := range []struct{ name, def string }{{"keep", "false"}, {"hub-addr", ""}, {"dir", ""}, {"containers", "false"}} {
		f := c.Flags().Lookup(tc.name)
		if f == nil {
			t.Errorf("no --%s flag", tc.name)
			continue
		}
		if f.DefValue != tc.def {
			t.Errorf("--%s default %q, want %q", tc.name, f.DefValue, tc.def)
		}
	}
	if err := c.Flags().Parse([]string{"--keep", "--hub-addr", "127.0.0.1:8443", "--containers"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Flags().GetBool("containers"); !v {
		t.Error("--containers did not parse as true")
	}
	if v, _ := c.Flags().GetString("hub-addr"); v != "127.0.0.1:8443" {
		t.Errorf("--hub-addr parsed as %q", v)
	}
	if err := c.Args(c, []string{"extra"}); err == nil {
		t.Error("demo accepted a positional argument")
	}
}
