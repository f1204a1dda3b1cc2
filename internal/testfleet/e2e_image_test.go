package testfleet_test

import (
	"archive/tar"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/node"
	"github.com/vk-ci/vk/node/exec/oci"
)

// needContainers skips the test unless the container backend can run
// here (as node's needOCI): root, cgroup v1, runc, and busybox-static for
// the test image; and the registry the images are pushed to.
func needContainers(t *testing.T) {
	t.Helper()
	if err := oci.Available("", ""); err != nil {
		need.Missingf(t, "container backend unavailable (needs root, cgroup v1 and runc): %v", err)
	}
	if _, err := os.Stat(ocitest.Busybox); err != nil {
		need.Missingf(t, "busybox-static missing for the test image (apt-get install -y busybox-static): %v", err)
	}
	needBinaries(t, testfleet.RegistryBinary)
}

// Markers the image test's jobs print: one baked into the image (only a
// job running in it can read it), one the image serves as a file, one the
// service builds from its own variable.
const (
	imageMarker   = "marker-only-inside-the-image"
	servedFile    = "served-by-the-db-service"
	serviceGreets = "greeting-from-the-service-variable"
)

// Issue #11's last item: a job with image: and a services: entry runs end
// to end through the fleet. One node with executor "auto" takes a
// pipeline of three jobs:
//
//   - "in-image" runs in an image pushed to the fleet's real
//     docker-registry, with a service (same image, alias db, busybox httpd
//     serving a file of the image and one made from the service's own
//     variable); its script reaches the service by its alias and reads a
//     file only the image has;
//   - "on-host" names no image and runs on the same node through the
//     process backend (the per-job "auto" choice);
//   - "no-such-image" names an image the registry lacks: it fails
//     image_pull, which this GitLab (whose failure_reasons lack
//     image_pull_failure) receives as runner_system_failure, with the
//     registry's answer in the trace.
//
// Every GitLab trace equals the hub's stored output byte for byte, and
// once the jobs are done the node holds no container, mount, job directory
// or job cgroup (the service's container is gone with its job); after
// Close its cgroup parents are gone too.
//
// spec: SPEC-13, FAIL-01, FAIL-04, FAIL-12, STAGE-01, API-39
func TestImageAndServiceJob(t *testing.T) {
	needContainers(t)
	dir := t.TempDir()
	var n *testfleet.Node
	// Registered before the fleet's Close, so it runs after it (and
	// before the TempDir is removed).
	t.Cleanup(func() {
		if n == nil {
			return
		}
		if left := n.Leftovers(); len(left) != 0 {
			t.Errorf("after Close the node still holds: %v", left)
		}
		parent := n.Config().Executor.CgroupParent
		for _, p := range []string{parent, parent + "-oci"} {
			if dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", p)); len(dirs) != 0 {
				t.Errorf("cgroup parents left after Close: %v", dirs)
			}
		}
	})
	f := newFleet(t, testfleet.Options{Dir: dir, Nodes: []testfleet.NodeSpec{{Executor: node.BackendAuto}}})
	n = f.Nodes()[0]
	if got := n.Config().Executor.Backend; got != node.BackendAuto {
		t.Fatalf("node backend %q, want auto", got)
	}
	reg := f.RegistryHost()
	if reg == "" {
		t.Fatal("an auto node started no registry")
	}

	// The image: busybox-static + the host's bash, a marker, a file to
	// serve, and port 8080 exposed so the node waits for the service to
	// listen before the script runs.
	layer := ocitest.Layer(t, append(ocitest.BaseFiles(t),
		ocitest.File{Name: "etc/vk-marker", Body: imageMarker + "\n"},
		ocitest.File{Name: "srv/", Typ: tar.TypeDir},
		ocitest.File{Name: "srv/hello.txt", Body: servedFile + "\n"},
	))
	img := reg + "/e2e/tools:v1"
	ocitest.Push(t, reg, "e2e/tools:v1", ocitest.Host(), map[string]any{
		"Env":          []string{"PATH=/bin"},
		"ExposedPorts": map[string]any{"8080/tcp": map[string]any{}},
	}, layer)

	tn := f.Tenants()[0]
	pl, err := tn.CreatePipeline("acme/images", readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{
		{
			Name: "in-image", Stage: "test",
			Image: gitlabfake.Image{Name: img},
			Services: []gitlabfake.Image{{
				Name: img, Alias: "db",
				Command:   []string{"sh", "-c", `echo "$GREETING" > /srv/greeting.txt && exec httpd -f -p 8080 -h /srv`},
				Variables: []gitlabfake.Variable{{Key: "GREETING", Value: serviceGreets}},
			}},
			Script: []string{
				"echo got=$(wget -qO- http://db:8080/hello.txt)",
				"echo greeting=$(wget -qO- http://db:8080/greeting.txt)",
				"echo image=$(cat /etc/vk-marker)",
				// Hold the job (and its service) until the test has
				// looked at the node; $((6*7)) keeps the echoed command
				// line from matching what the test waits for.
				`echo "$((6*7))-holding"; while [ ! -e /builds/go ]; do sleep 0.05; done`,
			},
		},
		{
			Name: "on-host", Stage: "test",
			Script: []string{`if [ -e /etc/vk-marker ]; then echo "in a container?"; exit 1; fi`, "echo ran-on-the-host"},
		},
		{
			Name: "no-such-image", Stage: "test",
			Image:  gitlabfake.Image{Name: reg + "/e2e/absent:v9"},
			Script: []string{"echo never-ran"},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, 2*time.Minute)

	// While the job runs, the node holds its container, its service's
	// container, its overlays and its cgroups: what Leftovers must not
	// list once the job is done.
	if err := tn.WaitTrace(ctx, pl.Jobs["in-image"], "42-holding"); err != nil {
		t.Fatal(err)
	}
	hin, err := tn.HubJob(ctx, pl.Jobs["in-image"])
	if err != nil {
		t.Fatal(err)
	}
	during := strings.Join(n.Leftovers(), "\n")
	t.Logf("the node holds while the job runs:\n%s", during)
	for _, want := range []string{
		"container " + hin.ID + "\n",
		"container " + hin.ID + "-svc",
		"mount " + filepath.Join(n.Dir, "oci", hin.ID),
		"jobdir " + filepath.Join(n.Dir, "oci", hin.ID),
		"cgroup " + filepath.Join("/sys/fs/cgroup/memory", n.Config().Executor.CgroupParent+"-oci", hin.ID),
	} {
		if !strings.Contains(during+"\n", want) {
			t.Errorf("while the job runs the node's leftovers lack %q:\n%s", want, during)
		}
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "oci", hin.ID, "builds", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	states, err := tn.WaitFinished(ctx, pl)
	if err != nil {
		t.Fatal(err)
	}
	job := func(name string) gitlabfake.JobInfo {
		ji, err := tn.GitLab.Job(pl.Jobs[name])
		if err != nil {
			t.Fatal(err)
		}
		return ji
	}
	traceHas := func(name string, ji gitlabfake.JobInfo, wants ...string) {
		t.Helper()
		plain := stripANSI(string(ji.Trace))
		for _, w := range wants {
			if !strings.Contains(plain, w) {
				t.Errorf("%s trace lacks %q:\n%s", name, w, plain)
			}
		}
	}

	// The job in its image, with its service reached by alias (FAIL-01:
	// success, no failure reason).
	in := job("in-image")
	if states["in-image"] != gitlabfake.StateSuccess || in.FailureReason != "" {
		t.Errorf("in-image = %s (%q), want success:\n%s", states["in-image"], in.FailureReason, in.Trace)
	}
	traceHas("in-image", in, "Using the oci executor with bash...",
		"got="+servedFile+"\n", "greeting="+serviceGreets+"\n", "image="+imageMarker+"\n")
	if plain := stripANSI(string(in.Trace)); strings.Contains(plain, "probably didn't start properly") {
		t.Errorf("in-image: the service failed its health check:\n%s", plain)
	}
	// The image and its service are prepared before the sources are
	// fetched and the script runs, and cleanup comes last (STAGE-01).
	checkSectionOrder(t, "in-image", in.Trace, "prepare_executor", "prepare_script", "get_sources", "step_script", "cleanup_file_variables")
	if d, ok := sectionTime(in.Trace, "prepare_executor"); ok {
		t.Logf("prepare_executor (pull, unpack, job container, service up and listening): %v", d)
	}

	// The imageless job, same node, process backend.
	host := job("on-host")
	if states["on-host"] != gitlabfake.StateSuccess {
		t.Errorf("on-host = %s (%q), want success:\n%s", states["on-host"], host.FailureReason, host.Trace)
	}
	traceHas("on-host", host, "Using the process executor with bash...", "ran-on-the-host\n")
	hhost, err := tn.HubJob(ctx, pl.Jobs["on-host"])
	if err != nil {
		t.Fatal(err)
	}
	if hin, err = tn.HubJob(ctx, pl.Jobs["in-image"]); err != nil {
		t.Fatal(err)
	}
	if hin.Node != n.ID || hhost.Node != n.ID {
		t.Errorf("jobs ran on %q and %q, want both on %q", hin.Node, hhost.Node, n.ID)
	}

	// The absent image (FAIL-04, through the older-GitLab fallback of
	// FAIL-12: this GitLab lists no image_pull_failure).
	bad := job("no-such-image")
	if states["no-such-image"] != gitlabfake.StateFailed || bad.FailureReason != "runner_system_failure" {
		t.Errorf("no-such-image = %s (%q), want failed runner_system_failure:\n%s", states["no-such-image"], bad.FailureReason, bad.Trace)
	}
	traceHas("no-such-image", bad, "e2e/absent:v9: not found")
	if strings.Contains(stripANSI(string(bad.Trace)), "never-ran\n") {
		t.Errorf("no-such-image ran its script:\n%s", bad.Trace)
	}

	// GitLab holds exactly what the node produced (API-39).
	checkTraces(t, ctx, tn, pl)

	// The jobs' results reached GitLab only after their cleanup: nothing
	// of them is left on the node, the service's container included.
	if left := n.Leftovers(); len(left) != 0 {
		t.Errorf("node holds after its jobs: %v", left)
	}
}

// checkSectionOrder asserts that trace opens the named GitLab sections
// (section_start:<unix>:<name>) in this order.
func checkSectionOrder(t *testing.T, job string, trace []byte, names ...string) {
	t.Helper()
	at := -1
	for _, name := range names {
		loc := regexp.MustCompile(`section_start:[0-9]+:` + regexp.QuoteMeta(name) + `[\[\r]`).FindIndex(trace)
		if loc == nil {
			t.Errorf("%s trace has no section %s:\n%s", job, name, stripANSI(string(trace)))
			return
		}
		if loc[0] < at {
			t.Errorf("%s trace opens section %s out of the order %v", job, name, names)
		}
		at = loc[0]
	}
}

// A container node killed mid-job (Node.Kill: the agent interrupted with
// an ended context) still removes the job's container, its service's,
// their overlays and cgroups before Kill returns: the stage runner's
// cleanup runs for interrupted jobs too (FAIL-08), so nothing waits for
// the next start's leftover sweep.
//
// spec: FAIL-08
func TestImageJobNodeKilled(t *testing.T) {
	needContainers(t)
	f := newFleet(t, testfleet.Options{Nodes: []testfleet.NodeSpec{{Executor: node.BackendAuto}}})
	n := f.Nodes()[0]
	reg := f.RegistryHost()
	ocitest.Push(t, reg, "e2e/tools:v1", ocitest.Host(), map[string]any{"Env": []string{"PATH=/bin"}},
		ocitest.Layer(t, ocitest.BaseFiles(t)))
	img := reg + "/e2e/tools:v1"
	tn := f.Tenants()[0]
	pl, err := tn.CreatePipeline("acme/killed", readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{{
		Name: "held", Stage: "test", Image: gitlabfake.Image{Name: img},
		Services: []gitlabfake.Image{{Name: img, Alias: "idle", Command: []string{"sleep", "300"}}},
		Script:   []string{`echo "$((6*7))-holding"; sleep 300`},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, time.Minute)
	if err := tn.WaitTrace(ctx, pl.Jobs["held"], "42-holding"); err != nil {
		t.Fatal(err)
	}
	hj, err := tn.HubJob(ctx, pl.Jobs["held"])
	if err != nil {
		t.Fatal(err)
	}
	during := strings.Join(n.Leftovers(), "\n") + "\n"
	for _, want := range []string{"container " + hj.ID + "\n", "container " + hj.ID + "-svc"} {
		if !strings.Contains(during, want) {
			t.Fatalf("while the job runs the node's leftovers lack %q:\n%s", want, during)
		}
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if left := n.Leftovers(); len(left) != 0 {
		t.Errorf("after Kill the node still holds: %v", left)
	}
}

// Close removes what a stopped node left on the host — a job cgroup with
// a live process in it, a mount and a job directory under its oci root —
// and reports them with ErrLeftovers, so a leak fails loudly instead of
// piling up on the test machine.
func TestNodeLeftoversSweptAtClose(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups and mounts")
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/cgroup.procs"); err != nil {
		need.Missingf(t, "no cgroup v1 memory controller: %v", err)
	}
	needBinaries(t, "git", "bash", "sleep")
	ctx := timeout(t, time.Minute)
	f, err := testfleet.Start(ctx, testfleet.Options{Dir: t.TempDir(), Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			f.Close()
		}
	})
	n := f.Nodes()[0]
	if left := n.Leftovers(); len(left) != 0 {
		t.Fatalf("an idle node holds %v", left)
	}

	// A job cgroup of the process backend with a process in it.
	cg := filepath.Join("/sys/fs/cgroup/memory", n.Config().Executor.CgroupParent, "leaked-job")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	sleeper := osexec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan error, 1)
	go func() { reaped <- sleeper.Wait() }()
	t.Cleanup(func() { sleeper.Process.Kill() })
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A job directory with a mount in it, as an overlay rootfs would be.
	mp := filepath.Join(n.Dir, "oci", "leaked-job", "job", "merged")
	if err := os.MkdirAll(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mp, unix.MNT_DETACH) })

	left := strings.Join(n.Leftovers(), "\n")
	for _, want := range []string{"cgroup " + cg, "mount " + mp, "jobdir " + filepath.Join(n.Dir, "oci", "leaked-job")} {
		if !strings.Contains(left, want) {
			t.Errorf("leftovers lack %q:\n%s", want, left)
		}
	}

	closed = true
	err = f.Close()
	if !errors.Is(err, testfleet.ErrLeftovers) || !strings.Contains(err.Error(), "leaked-job") {
		t.Errorf("Close = %v, want ErrLeftovers naming leaked-job", err)
	}
	if left := n.Leftovers(); len(left) != 0 {
		t.Errorf("after Close the node still holds: %v", left)
	}
	select {
	case <-reaped:
	case <-ctx.Done():
		t.Fatal("the process in the leaked cgroup was not killed")
	}
	if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leaked cgroup %s still there: %v", cg, err)
	}
}

// sectionTime is how long section name took by the trace's line
// timestamps (the timestamped trace format: "<RFC 3339> <stream> <text>").
func sectionTime(trace []byte, name string) (time.Duration, bool) {
	var start, end time.Time
	for _, line := range strings.Split(string(trace), "\n") {
		ts, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		switch {
		case regexp.MustCompile(`section_start:[0-9]+:` + regexp.QuoteMeta(name) + `[\[\r]`).MatchString(rest):
			start = at
		case strings.Contains(rest, "section_end:") && strings.Contains(rest, ":"+name+"\r"):
			end = at
		}
	}
	return end.Sub(start), !start.IsZero() && !end.IsZero()
}
