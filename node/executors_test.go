package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

var parentSeq atomic.Int32

// testCgroupParent is a cgroup parent of this test's own, removed (with
// its -oci sibling) when the test ends.
func testCgroupParent(t *testing.T) string {
	p := fmt.Sprintf("vk-nodetest-%d-%d", os.Getpid(), parentSeq.Add(1))
	t.Cleanup(func() {
		for _, q := range []string{p, p + "-oci"} {
			dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", q))
			for _, d := range dirs {
				removeCgroupTree(d, 5*time.Second)
			}
		}
	})
	return p
}

// startWith offers a reservation and starts job id with spec.
func startWith(t *testing.T, h *testHub, id, res string, spec job.JobSpec) {
	t.Helper()
	from := h.mark()
	h.send(&dispatch.Offer{Reservation: res, Envelope: env1, LeaseSecs: 90})
	rep, _ := waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == res })
	if rep.Reply != dispatch.ReplyAccepted {
		t.Fatalf("offer: %+v", rep)
	}
	h.send(&dispatch.Start{Job: id, Reservation: res, Envelope: env1, Spec: spec})
}

// A job with image: runs in that image through the oci backend (auto);
// the dropped service alias is a warning in its trace (DECISIONS 8); an
// image the registry does not have ends the job image_pull with the
// registry's answer in the trace.
//
// spec: SPEC-13, FAIL-04, NSESS-14, NSESS-17, STAGE-01
func TestOCIBackendRunsJobInItsImage(t *testing.T) {
	needOCI(t)
	reg := registrytest.New(t)
	pushTestImage(t, reg.Addr, "test/job", "v1", testRootfsLayer(t, ocitest.File{Name: "etc/vk-marker", Body: "inside-the-image\n"}))
	parent := testCgroupParent(t)
	h, a := connected(t, func(c *Config) {
		c.Executor.Backend = BackendAuto
		c.Executor.Cgroups = true
		c.Executor.CgroupParent = parent
		c.Executor.Images.PlainHTTP = []string{reg.Addr}
	}, Options{})
	if a.be.oci == nil {
		t.Fatalf("auto on a host with runc: no oci backend (%v)", a.be.ociReason)
	}

	spec := testSpec("cat /etc/vk-marker", "echo host=$(hostname)", "while [ ! -e /builds/go ]; do sleep 0.02; done")
	j := spec.GitLabCI
	j.Image = &job.Image{Name: reg.Addr + "/test/job:v1"}
	j.Services = []job.Image{{Name: reg.Addr + "/test/job:v1", Alias: "db,pg", Command: []string{"sleep", "300"}}}
	from := h.mark()
	startWith(t, h, "job-oci", "r1", spec)
	waitFor(h, from, func(u *dispatch.JobUpdate) bool { return u.Job == "job-oci" && u.Stage == "step_script" })
	// The job's network namespace is readable and has only lo: no egress
	// yet (NSESS-17).
	if tx, rx, ok := a.ociEgress("job-oci")(); !ok || tx != 0 || rx != 0 {
		t.Errorf("oci egress of a running job = %d, %d, %v; want 0, 0, true", tx, rx, ok)
	}
	if err := os.WriteFile(filepath.Join(a.be.ociRoot, "job-oci", "builds", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := resultOf(h, from, "job-oci")
	out := string(h.output("job-oci"))
	if res.Result.Failure != "" {
		t.Fatalf("failure %q: %s\n%s", res.Result.Failure, res.Result.Message, out)
	}
	if res.Egress == nil || res.Egress.Revision != 1 || res.Egress.TxBytes != 0 {
		t.Errorf("result egress = %+v, want revision 1 with no bytes (lo only)", res.Egress)
	}
	for _, want := range []string{"Using the oci executor with bash...", "inside-the-image", "host=job-oci",
		`has several aliases; vk uses one per service (the first, "db") and drops: pg`} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
	// running {stage} came from the runner's hook, in order (NSESS-14).
	var stages []string
	h.mu.Lock()
	for _, m := range h.log[from:] {
		if u, ok := m.(*dispatch.JobUpdate); ok && u.Job == "job-oci" && u.State == dispatch.JobRunning {
			stages = append(stages, u.Stage)
		}
	}
	h.mu.Unlock()
	if len(stages) < 3 || stages[0] != "prepare_executor" || !contains(stages, "step_script") {
		t.Errorf("running stages %v", stages)
	}

	// An image the registry does not have (FAIL-04).
	from = h.mark()
	spec2 := testSpec("echo never")
	spec2.GitLabCI.Image = &job.Image{Name: reg.Addr + "/test/absent:v9"}
	startWith(t, h, "job-nopull", "r2", spec2)
	res = resultOf(h, from, "job-nopull")
	out = string(h.output("job-nopull"))
	if res.Result.Failure != client.FailureImagePull {
		t.Errorf("absent image: failure %q, want image_pull\n%s", res.Result.Failure, out)
	}
	if !strings.Contains(out, "test/absent:v9: not found") || strings.Contains(out, "O never\n") {
		t.Errorf("trace lacks the registry's answer (not found):\n%s", out)
	}
	// Nothing of the jobs is left: containers, overlays, cgroups.
	if ents, _ := os.ReadDir(a.be.ociRoot); len(ents) != 1 {
		t.Errorf("oci root after the jobs: %v, want only .runc", ents)
	}
	if dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, "memory", parent+"-oci", "*")); len(dirs) != 0 {
		t.Errorf("job cgroups left: %v", dirs)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// noRunc makes the node's backend auto with a runc that does not exist,
// so the container backend is unavailable, and the given image_fallback.
func noRunc(fallback string) func(*Config) {
	return func(c *Config) {
		c.Executor.Backend, c.Executor.Runc, c.Executor.ImageFallback = BackendAuto, "/nonexistent/runc", fallback
	}
}

// Backend choice per job without a container runtime in play: the
// process backend notes an ignored image; require_image refuses an
// imageless job with configuration (FAIL-05); backend auto without a
// container runtime fails a job naming an image with configuration and a
// trace line saying what to install, unless image_fallback = "host".
//
// spec: FAIL-05, SPEC-13
func TestBackendChoice(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		image   string
		failure client.Failure
		trace   string
	}{
		{"process ignores the image", nil, "ruby:3.3", "",
			"WARNING: the job names image ruby:3.3 but this node runs jobs on the host (process executor): the image is ignored"},
		{"auto without an image runs on the host", func(c *Config) { c.Executor.Backend = BackendAuto }, "", "",
			"Using the process executor with bash..."},
		{"require_image refuses an imageless job", func(c *Config) {
			c.Executor.Backend, c.Executor.RequireImage = BackendAuto, true
		}, "", client.FailureConfiguration, "this node runs jobs only in containers and the job names no image"},
		// auto on a node without a container runtime (runc missing here).
		{"no runc, image", noRunc(""), "ruby:3.3", client.FailureConfiguration,
			"the job names image ruby:3.3 but this node cannot run containers"},
		{"no runc, remedy", noRunc(""), "ruby:3.3", client.FailureConfiguration,
			`install runc and enable cgroup v1 on the node (or use a node that has them), or set [executor] image_fallback = "host"`},
		{"no runc, no image", noRunc(""), "", "",
			"Using the process executor with bash..."},
		{"fallback host", noRunc(ImageFallbackHost), "ruby:3.3", "",
			"the job's image is ignored and it runs on the host"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := connected(t, func(c *Config) {
				c.Executor.CgroupParent = testCgroupParent(t)
				if tc.mod != nil {
					tc.mod(c)
				}
			}, Options{})
			spec := testSpec("echo ran-on-the-host")
			if tc.image != "" {
				spec.GitLabCI.Image = &job.Image{Name: tc.image}
			}
			from := h.mark()
			startWith(t, h, "job-c", "r1", spec)
			res := resultOf(h, from, "job-c")
			out := string(h.output("job-c"))
			if res.Result.Failure != tc.failure {
				t.Errorf("failure %q, want %q\n%s", res.Result.Failure, tc.failure, out)
			}
			if !strings.Contains(out, tc.trace) {
				t.Errorf("trace lacks %q:\n%s", tc.trace, out)
			}
			if ran := bytes.Contains([]byte(out), []byte("O ran-on-the-host\n")); ran != (tc.failure == "") {
				t.Errorf("script ran: %v\n%s", ran, out)
			}
		})
	}
}

func TestImageGCEvery(t *testing.T) {
	for _, tc := range []struct{ idle, want time.Duration }{
		{0, 10 * time.Second}, {20 * time.Second, 10 * time.Second}, {1800 * time.Second, 5 * time.Minute}, {2 * time.Minute, 30 * time.Second},
	} {
		if got := imageGCEvery(tc.idle); got != tc.want {
			t.Errorf("imageGCEvery(%v) = %v, want %v", tc.idle, got, tc.want)
		}
	}
}

// An image no job has used for image_cache_idle_secs leaves the cache at
// the next sweep; before that it stays (PLACE-15, DECISIONS 10).
//
// spec: PLACE-15
func TestImageCacheSweptWhenIdle(t *testing.T) {
	needOCI(t)
	reg := registrytest.New(t)
	pushTestImage(t, reg.Addr, "test/job", "v1", testRootfsLayer(t))
	parent := testCgroupParent(t)
	fake := clock.NewFake(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	swept := make(chan []string, 16)
	h, a := connected(t, func(c *Config) {
		c.Executor.Backend, c.Executor.CgroupParent = BackendOCI, parent
		c.Executor.Images.PlainHTTP = []string{reg.Addr}
		c.Node.ImageCacheIdleSecs = 60
	}, Options{Clock: fake, imageSwept: func(r []string) { swept <- r }})
	spec := testSpec("echo in-the-image")
	spec.GitLabCI.Image = &job.Image{Name: reg.Addr + "/test/job:v1"}
	from := h.mark()
	startWith(t, h, "job-gc", "r1", spec)
	if res := resultOf(h, from, "job-gc"); res.Result.Failure != "" {
		t.Fatalf("job failed: %+v\n%s", res.Result, h.output("job-gc"))
	}
	images := filepath.Join(a.cfg.Node.StateDir, "images", "images")
	if ents, _ := os.ReadDir(images); len(ents) != 1 {
		t.Fatalf("images after the job: %v, want 1", ents)
	}
	sweep := func() []string {
		t.Helper()
		select {
		case r := <-swept:
			return r
		case <-time.After(30 * time.Second):
			t.Fatal("no image cache sweep in 30 s")
			return nil
		}
	}
	// Sweeps every 15 s (a quarter of 60 s); the image is idle from the
	// job's end at the fake clock's start.
	for i := 1; i <= 3; i++ {
		fake.Advance(15 * time.Second)
		if r := sweep(); len(r) != 0 {
			t.Fatalf("sweep %d (%d s idle) removed %v", i, 15*i, r)
		}
	}
	fake.Advance(15 * time.Second)
	if r := sweep(); len(r) != 1 {
		t.Fatalf("sweep at 60 s idle removed %v, want the image", r)
	}
	if ents, _ := os.ReadDir(images); len(ents) != 0 {
		t.Errorf("images after the sweep: %v", ents)
	}
}

// The process backend refuses to start when it would run job scripts as
// root without allow_root_jobs, naming how to make the unprivileged user;
// with allow_root_jobs, or a user that is not root, it starts.
func TestProcessBackendRefusesRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the refusal concerns a node running as root")
	}
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		refused bool
	}{
		{"root, not allowed", func(c *Config) { c.Executor.AllowRootJobs = false }, true},
		{"explicit 0:0, not allowed", func(c *Config) { c.Executor.AllowRootJobs, c.Executor.User = false, "0:0" }, true},
		{"auto, not allowed", func(c *Config) { c.Executor.AllowRootJobs, c.Executor.Backend = false, BackendAuto }, true},
		{"root, allowed", func(c *Config) { c.Executor.AllowRootJobs = true }, false},
		{"unprivileged user", func(c *Config) { c.Executor.AllowRootJobs, c.Executor.User = false, "65534:65534" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHub(t)
			cfg := testConfig(t, t.TempDir())
			tc.mod(&cfg)
			opts := Options{Identity: &Identity{NodeID: testNode, Key: testKey, HubURL: h.url}, TLSConfig: h.cliTLS}
			a, err := Start(t.Context(), cfg, testlog.New(t), opts)
			if a != nil {
				defer a.Shutdown(context.Background())
			}
			if tc.refused != errors.Is(err, ErrRootJobs) {
				t.Fatalf("Start = %v, want refused %v", err, tc.refused)
			}
			if tc.refused && (!strings.Contains(err.Error(), "useradd") || !strings.Contains(err.Error(), "allow_root_jobs = true")) {
				t.Fatalf("refusal %q does not say how to create the user or allow root", err)
			}
		})
	}
}
