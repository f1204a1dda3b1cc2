package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/deptest"
	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/internal/testlog"
	vkexec "github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/oci/imagestore"
	"github.com/vk-ci/vk/proto/job"
)

// env is one test's registry, image store and executor, with a cleanup
// check that nothing is left behind: no runc containers, no mounts under
// the executor's root, no cgroup directories under its parent.
type env struct {
	reg   *registrytest.Registry
	store *imagestore.Store
	exe   *Executor
}

var testSeq struct {
	sync.Mutex
	n int
}

func newEnv(t testing.TB, mut func(*Config)) *env {
	t.Helper()
	if err := Available("", ""); err != nil {
		need.Missingf(t, "container executor unavailable here (.ci/run installs runc): %v", err)
	}
	reg := registrytest.New(t)
	base := ocitest.Layer(t, ocitest.BaseFiles(t))
	extra := ocitest.Layer(t, []ocitest.File{
		{Name: "www/", Typ: tar.TypeDir},
		{Name: "www/index.html", Body: "hello from the service\n"},
	})
	ocitest.Push(t, reg.Addr, "test/base:v1", ocitest.Host(), map[string]any{"Env": []string{"IMAGE_VAR=from-image", "PATH=/bin"}}, base, extra)
	store, err := imagestore.New(imagestore.Config{
		Root:  filepath.Join(t.TempDir(), "images"),
		Rules: imagestore.Rules{Registry: reg.Addr, PlainHTTP: []string{reg.Addr}},
		Log:   testlog.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	testSeq.Lock()
	testSeq.n++
	parent := fmt.Sprintf("vk-oci-test-%d-%d", os.Getpid(), testSeq.n)
	testSeq.Unlock()
	cfg := Config{
		Root:         filepath.Join(t.TempDir(), "jobs"),
		Images:       store,
		CgroupParent: parent,
		ServiceWait:  15 * time.Second,
		Log:          testlog.New(t),
	}
	if rt := os.Getenv("VK_TEST_OCI_RUNTIME"); rt != "" {
		cfg.Runtime = rt // the whole suite under another runtime, by hand
	}
	if mut != nil {
		mut(&cfg)
	}
	exe, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{reg: reg, store: store, exe: exe}
	t.Cleanup(func() { e.assertClean(t) })
	return e
}

func (e *env) assertClean(t testing.TB) {
	t.Helper()
	out, err := exec.Command(e.exe.runc, "--root", e.exe.cfg.RuncRoot, "list", "--quiet").CombinedOutput()
	if err != nil {
		t.Errorf("runc list: %v: %s", err, out)
	} else if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("containers left behind: %s", s)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, e.exe.cfg.Root) {
			t.Errorf("mount left behind: %s", l)
		}
	}
	left, _ := filepath.Glob(filepath.Join(e.exe.cfg.CgroupRoot, "*", e.exe.cfg.CgroupParent))
	if len(left) > 0 {
		t.Errorf("cgroup dirs left behind: %v", left)
	}
	if ents, _ := os.ReadDir(e.exe.cfg.Root); len(ents) > 1 { // .runc stays
		t.Errorf("job dirs left behind: %v", ents)
	}
}

var idSeq struct {
	sync.Mutex
	n int
}

func (e *env) prepare(t testing.TB, size vkexec.Size, spec Spec) *Job {
	t.Helper()
	j, err := e.tryPrepare(t, size, spec)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	return j
}

func (e *env) tryPrepare(t testing.TB, size vkexec.Size, spec Spec) (*Job, error) {
	t.Helper()
	idSeq.Lock()
	idSeq.n++
	id := fmt.Sprintf("t%d-%d", os.Getpid(), idSeq.n)
	idSeq.Unlock()
	j, err := e.exe.Prepare(context.Background(), vkexec.PrepareRequest{ID: id, Size: size}, spec)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := j.Cleanup(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return j, nil
}

func run(t testing.TB, j *Job, ctx context.Context, body string, env ...string) (string, string, vkexec.RunResult) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := j.Run(ctx, vkexec.Script{Name: "step", Body: body, Env: env}, &out, &errb)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return out.String(), errb.String(), res
}

var base = Spec{Image: job.Image{Name: "test/base:v1"}}

// Several scripts run one after another in the same container: files and
// the builds directory persist, streams stay apart, a failing step's exit
// code is reported, the image's environment and the script's extra
// environment are there.
// spec: SPEC-13
func TestStepsInOneContainer(t *testing.T) {
	e := newEnv(t, nil)
	j := e.prepare(t, vkexec.Size{}, base)
	ctx := context.Background()

	out, errs, res := run(t, j, ctx, `echo out; echo err >&2; echo kept > /builds/f; echo root-kept > /var-file; pwd; echo "$IMAGE_VAR $STEP_VAR"`, "STEP_VAR=from-step")
	if res.ExitCode != 0 || out != "out\n/builds\nfrom-image from-step\n" || errs != "err\n" {
		t.Fatalf("step 1: %+v stdout %q stderr %q", res, out, errs)
	}
	out, _, res = run(t, j, ctx, `cat /builds/f /var-file; echo "[$STEP_VAR]"; exit 3`)
	if res.ExitCode != 3 || out != "kept\nroot-kept\n[]\n" {
		t.Fatalf("step 2: %+v stdout %q", res, out)
	}
	if b, err := os.ReadFile(j.HostPath("/builds/f")); err != nil || string(b) != "kept\n" {
		t.Fatalf("HostPath(/builds/f): %q %v", b, err)
	}
	if b, err := os.ReadFile(j.HostPath("/var-file")); err != nil || string(b) != "root-kept\n" {
		t.Fatalf("HostPath(/var-file): %q %v", b, err)
	}
	if err := os.WriteFile(j.HostPath(j.TempDir()+"/file-var"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, _ = run(t, j, ctx, `cat `+j.TempDir()+`/file-var`)
	if out != "secret" {
		t.Fatalf("file written through HostPath: %q", out)
	}
	u := j.Usage()
	if u.CPU <= 0 || u.PeakMemBytes <= 0 || u.Wall <= 0 {
		t.Fatalf("usage %+v", u)
	}
	if err := j.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Run(ctx, vkexec.Script{Name: "late", Body: "true"}, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, vkexec.ErrCleanedUp) {
		t.Fatalf("run after cleanup: %v", err)
	}
	if u2 := j.Usage(); u2.CPU != u.CPU && u2.CPU < u.CPU {
		t.Fatalf("usage after cleanup went down: %+v then %+v", u, u2)
	}
}

// image.user overrides the image's USER; names resolve through the
// image's /etc/passwd and /etc/group; an unknown user is a configuration
// error. The image's entrypoint runs, and image.entrypoint [""] clears it.
// spec: SPEC-14, SPEC-13
func TestUserAndEntrypoint(t *testing.T) {
	e := newEnv(t, nil)
	ocitest.Push(t, e.reg.Addr, "test/user:v1", ocitest.Host(), map[string]any{
		"User":       "builder",
		"Entrypoint": []string{"/bin/sh", "-c", `echo ran > /tmp/entrypoint-ran; exec "$@"`, "entry"},
	}, ocitest.Layer(t, ocitest.BaseFiles(t)))
	ctx := context.Background()

	j := e.prepare(t, vkexec.Size{}, Spec{Image: job.Image{Name: "test/user:v1"}})
	out, _, _ := run(t, j, ctx, `id -u; id -g; id -G; echo $HOME; cat /tmp/entrypoint-ran; touch /builds/mine && echo writable`)
	if out != "1000\n1000\n1000 2000\n/home/builder\nran\nwritable\n" {
		t.Fatalf("image user: %q", out)
	}
	// Files the node writes (a checkout) become the job user's with Adopt.
	if err := os.MkdirAll(j.HostPath("/builds/project"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(j.HostPath("/builds/project/file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := run(t, j, ctx, `echo y >> /builds/project/file 2>/dev/null && echo appended || echo denied`); out != "denied\n" {
		t.Fatalf("before Adopt: %q", out)
	}
	if err := j.Adopt(j.HostPath("/builds/project")); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := run(t, j, ctx, `echo y >> /builds/project/file && echo appended`); out != "appended\n" {
		t.Fatalf("after Adopt: %q", out)
	}
	j = e.prepare(t, vkexec.Size{}, Spec{Image: job.Image{Name: "test/user:v1", User: "0:2000", Entrypoint: []string{""}}})
	out, _, _ = run(t, j, ctx, `id -u; id -g; test -e /tmp/entrypoint-ran && echo entry || echo no-entry`)
	if out != "0\n2000\nno-entry\n" {
		t.Fatalf("image.user 0:2000, entrypoint cleared: %q", out)
	}
	_, err := e.tryPrepare(t, vkexec.Size{}, Spec{Image: job.Image{Name: "test/user:v1", User: "nosuchuser"}})
	if !errors.Is(err, ErrConfig) || !errors.Is(err, vkexec.ErrPrepare) {
		t.Fatalf("unknown user: err = %v, want ErrConfig", err)
	}
}

// Memory over the envelope: the kernel kills the process and Run reports
// OOMKilled.
func TestMemoryLimitOOM(t *testing.T) {
	e := newEnv(t, nil)
	j := e.prepare(t, vkexec.Size{MemMiB: 32, CPUs: 1}, base)
	out, errs, res := run(t, j, context.Background(), `dd if=/dev/zero of=/dev/null bs=128M count=1; echo "dd exit $?"`)
	if !res.OOMKilled {
		lim, _ := os.ReadFile(filepath.Join(j.cg.dir("memory"), "memory.limit_in_bytes"))
		hier, _ := os.ReadFile(filepath.Join(j.cg.dir("memory"), "memory.use_hierarchy"))
		oc, _ := os.ReadFile(filepath.Join(j.cg.dir("memory"), "memory.oom_control"))
		t.Fatalf("result %+v: OOMKilled not reported; out %q err %q; limit %s hier %s oom %s", res, out, errs, lim, hier, oc)
	}
	if out != "dd exit 137\n" {
		t.Fatalf("dd was not killed: %q", out)
	}
	b, err := os.ReadFile(filepath.Join(j.cg.dir("cpu"), "cpu.cfs_quota_us"))
	if err != nil || strings.TrimSpace(string(b)) != "100000" {
		t.Fatalf("cpu quota %q %v", b, err)
	}
}

// ctx ending (the job's timeout) kills the script at once.
func TestTimeoutViaContext(t *testing.T) {
	e := newEnv(t, nil)
	j := e.prepare(t, vkexec.Size{}, base)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, res := run(t, j, ctx, `sleep 60; echo finished`)
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("run took %v after the context ended", d)
	}
	if res.ExitCode != -1 || res.Signal != "killed" {
		t.Fatalf("result %+v, want killed", res)
	}
	// The container survives for the next script.
	if out, _, res := run(t, j, context.Background(), `echo alive`); out != "alive\n" || res.ExitCode != 0 {
		t.Fatalf("after timeout: %q %+v", out, res)
	}
}

// watch is a writer that closes ready when want has been written.
type watch struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  string
	ready chan struct{}
	once  sync.Once
}

func newWatch(want string) *watch { return &watch{want: want, ready: make(chan struct{})} }

func (w *watch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

func (w *watch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestCancel(t *testing.T) {
	e := newEnv(t, nil)
	j := e.prepare(t, vkexec.Size{}, base)
	for _, tc := range []struct {
		name     string
		mode     vkexec.CancelMode
		script   string
		wantCode int
		wantSig  string
		wantOut  string
	}{
		{"graceful", vkexec.Graceful, `trap 'echo got-term; exit 7' TERM; echo ready; sleep 60 & wait`, 7, "", "got-term"},
		{"immediate", vkexec.Immediate, `trap '' TERM; echo ready; sleep 60; echo not-reached`, -1, "killed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWatch("ready")
			done := make(chan vkexec.RunResult, 1)
			go func() {
				res, err := j.Run(context.Background(), vkexec.Script{Name: tc.name, Body: tc.script}, w, &bytes.Buffer{})
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			select {
			case <-w.ready:
			case <-time.After(30 * time.Second):
				t.Fatalf("script never got ready: %q", w.String())
			}
			j.Cancel(tc.mode)
			res := <-done
			if res.ExitCode != tc.wantCode || res.Signal != tc.wantSig || !strings.Contains(w.String(), tc.wantOut) || strings.Contains(w.String(), "not-reached") {
				t.Fatalf("result %+v output %q", res, w.String())
			}
		})
	}
}

// A step ends with its script, as gitlab-runner's does: what the script
// left running in the background (a server started with &) holds the
// step's output open, and `runc exec` would wait for it; the node kills
// it once the script exited. The step's output up to then is kept.
//
// spec: STAGE-01
func TestBackgroundProcessDoesNotHoldStep(t *testing.T) {
	e := newEnv(t, nil)
	j := e.prepare(t, vkexec.Size{}, base)
	var out bytes.Buffer
	done := make(chan vkexec.RunResult, 1)
	go func() {
		res, err := j.Run(context.Background(), vkexec.Script{Name: "bg", Body: `sleep 300 & echo "started $!"`}, &out, &bytes.Buffer{})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var res vkexec.RunResult
	select {
	case res = <-done:
	case <-time.After(60 * time.Second): // a failsafe far below the 300 s the bug would take
		t.Fatal("the step still runs a minute after its script ended: the background sleep holds it")
	}
	if res.ExitCode != 0 || !strings.Contains(out.String(), "started ") {
		t.Fatalf("result %+v output %q", res, out.String())
	}
	// Nothing of the script is left in the container: the next step runs
	// alone, and a `pgrep sleep` finds none.
	var ps bytes.Buffer
	res, err := j.Run(context.Background(), vkexec.Script{Name: "check", Body: `for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\0' ' '; echo; done | grep -c '^sleep 300' || true`}, &ps, &bytes.Buffer{})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(ps.String()) != "0" {
		t.Errorf("after the step: %+v, %v; sleep processes left: %q", res, err, ps.String())
	}
}

// A service runs beside the job in its network namespace, with its own
// variables and command, reached at 127.0.0.1 and by its alias; only the
// first alias is used and the others are named in a warning.
// spec: SPEC-13
func TestServiceReachedByAlias(t *testing.T) {
	e := newEnv(t, nil)
	spec := base
	spec.Services = []job.Image{{
		Name:      "test/base:v1",
		Alias:     "web,www2",
		Command:   []string{"sh", "-c", `mkdir -p /srv && echo "$GREETING" > /srv/index.html && exec httpd -f -p 8080 -h /srv`},
		Variables: []job.Variable{{Key: "GREETING", Value: "hi from service"}},
		Ports:     []job.Port{{Number: 8080}},
	}}
	j := e.prepare(t, vkexec.Size{MemMiB: 256}, spec)
	warns := strings.Join(j.Warnings(), "\n")
	if !strings.Contains(warns, "www2") || !strings.Contains(warns, `"web"`) {
		t.Fatalf("warnings %q do not name the dropped alias", warns)
	}
	out, errs, res := run(t, j, context.Background(), `wget -q -O - http://web:8080/ && wget -q -O - http://127.0.0.1:8080/ && wget -q -O - http://test__base:8080/ && grep -c web /etc/hosts`)
	if res.ExitCode != 0 || out != "hi from service\nhi from service\nhi from service\n1\n" {
		t.Fatalf("stdout %q stderr %q %+v", out, errs, res)
	}
	if f := j.ServiceFailures(); len(f) != 0 {
		t.Fatalf("service failures: %q", f)
	}
}

// A service that exits early is reported with its exit code and its last
// output lines, in gitlab-runner's words.
func TestServiceExitsEarly(t *testing.T) {
	e := newEnv(t, nil)
	spec := base
	spec.Services = []job.Image{{Name: "test/base:v1", Alias: "db", Command: []string{"sh", "-c", "echo starting; echo boom >&2; exit 3"}}}
	j := e.prepare(t, vkexec.Size{}, spec)
	w := strings.Join(j.Warnings(), "\n")
	for _, want := range []string{"*** WARNING: Service test/base:v1 probably didn't start properly.", "Health check error:", "exited with code 3", "Service container logs:", "starting", "boom"} {
		if !strings.Contains(w, want) {
			t.Fatalf("warning %q lacks %q", w, want)
		}
	}
	if len(j.ServiceFailures()) != 1 {
		t.Fatalf("ServiceFailures = %q", j.ServiceFailures())
	}
}

// A job or service image that cannot be pulled fails Prepare with the
// image_pull sentinel, and leaves nothing behind.
// spec: FAIL-04
func TestPrepareImagePullFailure(t *testing.T) {
	e := newEnv(t, nil)
	ocitest.Push(t, e.reg.Addr, "test/in-registry-only:v1", ocitest.Host(), nil, ocitest.Layer(t, []ocitest.File{{Name: "f"}}))
	for _, spec := range []Spec{
		{Image: job.Image{Name: "test/missing:v1"}},
		{Image: job.Image{Name: "test/base:v1"}, Services: []job.Image{{Name: "test/missing-svc:v1"}}},
		{Image: job.Image{Name: "test/in-registry-only:v1", PullPolicy: []string{"never"}}},
	} {
		_, err := e.tryPrepare(t, vkexec.Size{}, spec)
		if !errors.Is(err, ErrImagePull) || !errors.Is(err, vkexec.ErrPrepare) {
			t.Fatalf("%+v: err = %v, want ErrImagePull and ErrPrepare", spec, err)
		}
	}
}

// if-not-present runs a stored image with the registry down.
// spec: FAIL-04
func TestIfNotPresentWithRegistryDown(t *testing.T) {
	e := newEnv(t, nil)
	j := e.prepare(t, vkexec.Size{}, base)
	if err := j.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.reg.Stop()
	spec := Spec{Image: job.Image{Name: "test/base:v1", PullPolicy: []string{"if-not-present"}}}
	j = e.prepare(t, vkexec.Size{}, spec)
	if out, _, _ := run(t, j, context.Background(), "echo cached"); out != "cached\n" {
		t.Fatalf("out %q", out)
	}
	_, err := e.tryPrepare(t, vkexec.Size{}, base) // always: needs the registry
	if !errors.Is(err, ErrImagePull) {
		t.Fatalf("always with the registry down: %v", err)
	}
}

// Whiteouts of an upper layer hide lower files inside the container.
func TestWhiteoutsInContainer(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.NoOverlay = true }) // also covers the copy fallback
	ocitest.Push(t, e.reg.Addr, "test/wh:v1", ocitest.Host(), nil,
		ocitest.Layer(t, ocitest.BaseFiles(t)),
		ocitest.Layer(t, []ocitest.File{{Name: "data/", Typ: tar.TypeDir}, {Name: "data/gone", Body: "x"}, {Name: "data/kept", Body: "y"}}),
		ocitest.Layer(t, []ocitest.File{{Name: "data/.wh.gone"}}))
	j := e.prepare(t, vkexec.Size{}, Spec{Image: job.Image{Name: "test/wh:v1"}})
	if out, _, _ := run(t, j, context.Background(), "ls /data"); out != "kept\n" {
		t.Fatalf("ls /data = %q", out)
	}
}

// The chooser sends a job with an image to the container backend, one
// without to the process backend, and refuses what the node cannot run.
func TestChooser(t *testing.T) {
	proc := fakeExecutor{}
	oci := &Executor{}
	for _, tc := range []struct {
		name    string
		c       Chooser
		j       job.CiJob
		want    string // "process", "oci", or "config"
		warning bool
	}{
		{"no image → process", Chooser{Process: proc, OCI: oci}, job.CiJob{}, "process", false},
		{"image → oci", Chooser{Process: proc, OCI: oci}, job.CiJob{Image: &job.Image{Name: "ruby:3"}}, "oci", false},
		{"default image → oci", Chooser{Process: proc, OCI: oci, DefaultImage: "alpine"}, job.CiJob{}, "oci", false},
		{"image required", Chooser{Process: proc, OCI: oci, RequireImage: true}, job.CiJob{}, "config", false},
		{"image but no oci", Chooser{Process: proc}, job.CiJob{Image: &job.Image{Name: "ruby:3"}}, "config", false},
		{"services without image", Chooser{Process: proc, OCI: oci}, job.CiJob{Services: []job.Image{{Name: "pg"}}}, "process", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex, warns, err := tc.c.For(&tc.j)
			got := "config"
			switch ex.(type) {
			case fakeExecutor:
				got = "process"
			case bound:
				got = "oci"
			}
			if got != tc.want || (got == "config") != errors.Is(err, ErrConfig) || (len(warns) > 0) != tc.warning {
				t.Fatalf("got %s (%v, warnings %q), want %s", got, err, warns, tc.want)
			}
		})
	}
	ex, _, _ := (&Chooser{OCI: oci, DefaultImage: "alpine"}).For(&job.CiJob{Image: &job.Image{User: "1000"}, Variables: []job.Variable{{Key: "A", Value: "1"}, {Key: "F", Value: "x", File: true}}})
	b := ex.(bound)
	if b.spec.Image.Name != "alpine" || b.spec.Image.User != "1000" || strings.Join(b.spec.ServiceEnv, ",") != "A=1" {
		t.Fatalf("bound spec %+v", b.spec)
	}
}

type fakeExecutor struct{}

func (fakeExecutor) Prepare(context.Context, vkexec.PrepareRequest) (vkexec.Job, error) {
	return nil, errors.New("fake")
}

func TestServiceHostnames(t *testing.T) {
	for _, tc := range []struct {
		img     job.Image
		names   string
		dropped string
	}{
		{job.Image{Name: "postgres:15"}, "postgres", ""},
		{job.Image{Name: "registry.example.com/group/pg:15", Alias: "db"}, "db registry.example.com__group__pg registry.example.com-group-pg", ""},
		{job.Image{Name: "pg@sha256:abc", Alias: "a, b c"}, "a pg", "b c"},
		{job.Image{Name: "host:5000/x", Alias: ""}, "service", ""},
	} {
		n, d := ServiceHostnames(tc.img)
		if strings.Join(n, " ") != tc.names || strings.Join(d, " ") != tc.dropped {
			t.Errorf("%+v: names %q dropped %q", tc.img, n, d)
		}
		for _, h := range n {
			if !regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`).MatchString(h) {
				t.Errorf("%+v: invalid host name %q", tc.img, h)
			}
		}
	}
}

// spec: STAGE-08
func TestBuiltImageReferences(t *testing.T) {
	t.Skip("STAGE-08 [later]: image build references (dockerfile:, compose:) are not resolved yet; registry names are resolved under the node's image rules (imagestore.TestResolve, TestMirrors)")
}

// An image whose entrypoint does not run its arguments leaves no
// container to exec in: Run fails to start, naming the cause.
func TestEntrypointThatExits(t *testing.T) {
	e := newEnv(t, nil)
	ocitest.Push(t, e.reg.Addr, "test/exits:v1", ocitest.Host(), map[string]any{
		"Entrypoint": []string{"/bin/sh", "-c", "echo entrypoint-gave-up; exit 0"},
	}, ocitest.Layer(t, ocitest.BaseFiles(t)))
	j := e.prepare(t, vkexec.Size{}, Spec{Image: job.Image{Name: "test/exits:v1"}})
	var err error
	for range 200 { // the entrypoint exits on its own; poll with a bound
		if _, err = j.Run(context.Background(), vkexec.Script{Name: "s", Body: "true"}, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !errors.Is(err, vkexec.ErrStart) || !strings.Contains(err.Error(), "entrypoint-gave-up") {
		t.Fatalf("err = %v", err)
	}
}

// The container backend depends on proto and node/exec, never on the hub
// or the scheduler. (Pulls go through go-containerregistry's remote, whose
// authn package brings docker/cli's config reader; the store never reads a
// docker config: it passes each host's job credential itself.)
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/node/exec/oci",
		"github.com/vk-ci/vk/hub", "github.com/vk-ci/vk/hub/", "github.com/vk-ci/vk/sched", "github.com/vk-ci/vk/sched/",
		"github.com/vk-ci/vk/relay", "github.com/vk-ci/vk/relay/")
}

// Jobs run side by side: one image unpacked once, separate rootfs and
// cgroups under the shared parent, the node's cache directory shared.
func TestConcurrentJobs(t *testing.T) {
	cache := t.TempDir()
	e := newEnv(t, func(c *Config) { c.CacheDir = cache })
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j, err := e.tryPrepare(t, vkexec.Size{MemMiB: 128}, base)
			if err != nil {
				errs <- err
				return
			}
			var out bytes.Buffer
			res, err := j.Run(context.Background(), vkexec.Script{Name: "s", Body: fmt.Sprintf("echo %d > /cache/job%d; echo %d > /private; cat /private", i, i, i)}, &out, io.Discard)
			if err != nil || res.ExitCode != 0 || out.String() != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Errorf("job %d: %v %+v %q", i, err, res, out.String())
			}
			errs <- j.Cleanup(context.Background())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for i := range 3 {
		if b, err := os.ReadFile(filepath.Join(cache, fmt.Sprintf("job%d", i))); err != nil || string(b) != fmt.Sprintf("%d\n", i) {
			t.Errorf("cache file %d: %q %v", i, b, err)
		}
	}
}

// A context that has ended before runc exec could start the script still
// reports the script killed, not runc's own failure status.
func TestTimeoutBeforeScriptStarts(t *testing.T) {
	e := newEnv(t, nil)
	j := e.prepare(t, vkexec.Size{}, base)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, res := run(t, j, ctx, `echo started`)
	if res.ExitCode != -1 || res.Signal != "killed" {
		t.Fatalf("result %+v, want killed", res)
	}
}
