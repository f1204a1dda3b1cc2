package microvm

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/exec/oci/imagestore"
	"github.com/vk-ci/vk/proto/job"
)

// A job VM and a service VM, both booted from one image whose USER is
// builder and whose entrypoint announces itself and execs its arguments:
// the job's scripts run through the entrypoint as builder in a job tree
// builder owns; the service's VM runs the service's command through the
// same entrypoint with the job's and its own variables; the job reaches
// it by its alias over the job's private network once the health check
// saw its port; the second alias is dropped with a warning; cleanup
// destroys both VMs and the network.
// spec: STAGE-07
func TestServiceVMReachedByAlias(t *testing.T) {
	store := serviceImageStore(t)
	e, err := New(Config{Root: filepath.Join(t.TempDir(), "vms"), Agent: buildAgent(t), Accel: AccelTCG,
		BootTimeout: tcgBootTimeout, Images: store, DiskMiB: 64, ServiceMemMiB: 192, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{
		Image: job.Image{Name: "test/vm:v1"},
		Services: []job.Image{{
			Name: "test/vm:v1", Alias: "web,www2",
			Command:   []string{"sh", "-c", `mkdir -p /tmp/srv && echo "$GREETING from $JOB_VAR as $(id -u)" > /tmp/srv/index.html && exec httpd -f -p 8080 -h /tmp/srv`},
			Variables: []job.Variable{{Key: "GREETING", Value: "hi"}},
			Ports:     []job.Port{{Number: 8080}},
		}},
		ServiceEnv: []string{"JOB_VAR=the-job"},
	}
	ji, err := e.For(spec).Prepare(context.Background(), exec.PrepareRequest{ID: "svcjob", Size: exec.Size{MemMiB: 256, CPUs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	j := ji.(*Job)
	defer j.Cleanup(context.Background())
	warns := strings.Join(j.Warnings(), "\n")
	if !strings.Contains(warns, "www2") || strings.Contains(warns, "probably didn't start") {
		t.Errorf("warnings %q: want the dropped alias named and no failed service", warns)
	}
	var out, errb bytes.Buffer
	res, err := j.Run(context.Background(), exec.Script{Name: "s", Body: `id -u; id -g; stat -c %u /builds; wget -q -O - http://web:8080/ && wget -q -O - http://test__vm:8080/; grep -c web /etc/hosts`}, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	want := "entrypoint as 1000\n1000\n1000\n1000\nhi from the-job as 1000\nhi from the-job as 1000\n1\n"
	if res.ExitCode != 0 || out.String() != want {
		t.Errorf("job script: exit %d\nstdout %q\nstderr %q\nwant stdout %q", res.ExitCode, out.String(), errb.String(), want)
	}
	if f := j.ServiceFailures(); len(f) != 0 {
		t.Errorf("service failures: %q", f)
	}
	if u := j.Usage(); u.CPU <= 0 || u.PeakMemBytes <= 0 {
		t.Errorf("usage %+v", u)
	}
	pids := []int{j.PID(), j.svcs.list[0].vm.PID()}
	if err := j.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("QEMU %d still runs after cleanup", pid)
		}
	}
	ents, _ := os.ReadDir(e.cfg.Root)
	var names []string
	for _, en := range ents {
		names = append(names, en.Name())
	}
	if strings.Join(names, " ") != "disks initrd.cpio" {
		t.Errorf("left in the VM root: %v", names)
	}
}

// serviceImageStore pushes test/vm:v1 to a real registry: busybox, a
// builder user, and an entrypoint that announces itself and execs its
// arguments; it returns an image store pulling from that registry. It
// skips (fails under CI=true) without QEMU, a guest kernel or the image
// tools.
func serviceImageStore(t *testing.T) *imagestore.Store {
	t.Helper()
	if err := Available("", ""); err != nil {
		need.Missingf(t, "%v", err)
	}
	if err := AvailableImages(); err != nil {
		need.Missingf(t, "%v", err)
	}
	reg := registrytest.New(t)
	layer := ocitest.Layer(t, append(ocitest.BaseFiles(t),
		ocitest.File{Name: "entry", Mode: 0o755, Body: "#!/bin/sh\necho \"entrypoint as $(id -u)\"\nexec \"$@\"\n"}))
	ocitest.Push(t, reg.Addr, "test/vm:v1", ocitest.Host(), map[string]any{
		"Env": []string{"PATH=/bin"}, "User": "builder", "Entrypoint": []string{"/entry"},
	}, layer)
	store, err := imagestore.New(imagestore.Config{Root: filepath.Join(t.TempDir(), "images"),
		Rules: imagestore.Rules{Registry: reg.Addr, PlainHTTP: []string{reg.Addr}}, Log: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

var memFloor = flag.Bool("microvm.memfloor", false, "measure the smallest service VM that boots and serves (TestServiceMemFloor; a few minutes under TCG)")

// TestServiceMemFloor is a measurement, off by default (-microvm.memfloor):
// for each service_mem_mib it boots a service VM from test/vm:v1 beside a
// 256 MiB job VM, the service serving its own /proc/meminfo over HTTP,
// and logs whether the job read it and how much memory the service's
// guest had left. docs/node.md keeps the figures beside the floor. It
// fails if a service of 128 MiB, the least the node's config accepts
// (node's minServiceMemMiB), does not boot and serve.
func TestServiceMemFloor(t *testing.T) {
	if !*memFloor {
		t.Skip("a measurement: run with -microvm.memfloor")
	}
	store := serviceImageStore(t)
	agent := buildAgent(t)
	const floor = 128
	served := map[int64]bool{}
	for _, mib := range []int64{64, 96, 112, floor, 160} {
		e, err := New(Config{Root: filepath.Join(t.TempDir(), "vms"), Agent: agent, Accel: AccelTCG,
			BootTimeout: 2 * time.Minute, Images: store, DiskMiB: 64, ServiceMemMiB: mib, Log: testlog.New(t)})
		if err != nil {
			t.Fatal(err)
		}
		spec := Spec{Image: job.Image{Name: "test/vm:v1"}, Services: []job.Image{{
			Name: "test/vm:v1", Alias: "web",
			Command: []string{"sh", "-c", `mkdir -p /tmp/srv && grep -E 'MemTotal|MemAvailable' /proc/meminfo > /tmp/srv/index.html && exec httpd -f -p 8080 -h /tmp/srv`},
			Ports:   []job.Port{{Number: 8080}},
		}}}
		began := time.Now()
		ji, err := e.For(spec).Prepare(context.Background(), exec.PrepareRequest{ID: "floor", Size: exec.Size{MemMiB: 256, CPUs: 1}})
		if err != nil {
			t.Logf("service_mem_mib %d: prepare failed after %v: %v", mib, time.Since(began).Round(time.Second), err)
			continue
		}
		j := ji.(*Job)
		var out, errb bytes.Buffer
		res, err := j.Run(context.Background(), exec.Script{Name: "s", Body: `wget -q -O - http://web:8080/`}, &out, &errb)
		t.Logf("service_mem_mib %d: prepared in %v; job read exit %d err %v: %q %q; service failures %q", mib,
			time.Since(began).Round(time.Second), res.ExitCode, err, out.String(), errb.String(), j.ServiceFailures())
		served[mib] = err == nil && res.ExitCode == 0 && strings.Contains(out.String(), "MemAvailable:")
		j.Cleanup(context.Background())
	}
	if !served[floor] {
		t.Errorf("a %d MiB service VM, the floor the node accepts, did not boot and serve", floor)
	}
}

// A service that exited is reported in gitlab-runner's words// A service that exited is reported in gitlab-runner's words, with its
// exit code and its last output, both by Prepare's health check and by
// ServiceFailures later.
func TestServiceExitReportedInRunnerWords(t *testing.T) {
	dir := t.TempDir()
	sv := &service{name: "test/db:v1", logPath: filepath.Join(dir, "service.log"), done: make(chan struct{}), code: 3}
	var log strings.Builder
	for i := range 30 {
		log.WriteString("line " + string(rune('a'+i%26)) + "\n")
	}
	log.WriteString("boom\n")
	if err := os.WriteFile(sv.logPath, []byte(log.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	j := &Job{svcs: &services{list: []*service{sv}}}
	if f := j.ServiceFailures(); len(f) != 0 {
		t.Fatalf("a running service reported: %q", f)
	}
	close(sv.done)
	f := j.ServiceFailures()
	if len(f) != 1 {
		t.Fatalf("ServiceFailures = %q, want one", f)
	}
	for _, want := range []string{"*** WARNING: Service test/db:v1 probably didn't start properly.\n\n", "Health check error:\nservice \"test/db:v1\" exited with code 3\n\n", "Service container logs:\n", "boom\n\n*********\n"} {
		if !strings.Contains(f[0], want) {
			t.Errorf("warning %q lacks %q", f[0], want)
		}
	}
	if n := strings.Count(f[0], "line "); n != serviceLogLines-1 {
		t.Errorf("warning shows %d earlier log lines, want the last %d lines in all", n, serviceLogLines)
	}
	if err := sv.healthNoPorts(context.Background(), time.Hour); err == nil || !strings.Contains(err.Error(), "exited with code 3") {
		t.Errorf("health of an exited service without ports: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	running := &service{name: "x", done: make(chan struct{})}
	if err := running.healthNoPorts(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("health with an ended context: %v", err)
	}
}

// Prepare's health check of a booted service that has already exited:
// with the default wait it warns in gitlab-runner's words; with a
// negative ServiceWait (wait_for_services_timeout = -1) there is no check
// and no warning, as gitlab-runner skips the wait.
func TestNegativeServiceWaitSkipsTheHealthCheck(t *testing.T) {
	for _, tt := range []struct {
		wait time.Duration
		warn bool
	}{{DefaultServiceWait, true}, {-1, false}} {
		sv := &service{name: "test/db:v1", logPath: filepath.Join(t.TempDir(), "service.log"), done: make(chan struct{}), code: 3}
		close(sv.done)
		ss := &services{list: []*service{sv}, booted: make(chan bootResult, 1)}
		ss.booted <- bootResult{sv: sv}
		j := &Job{e: &Executor{cfg: Config{ServiceWait: tt.wait, ServiceGrace: time.Hour}}, svcs: ss}
		if err := ss.ready(context.Background(), j); err != nil {
			t.Fatalf("wait %v: ready = %v", tt.wait, err)
		}
		w := strings.Join(j.Warnings(), "\n")
		if got := strings.Contains(w, "exited with code 3"); got != tt.warn {
			t.Errorf("wait %v: warnings %q, want the exit reported = %v", tt.wait, w, tt.warn)
		}
	}
}
