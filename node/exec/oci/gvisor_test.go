package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/need"

	vkexec "github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/proto/job"
)

// needRunsc skips without gVisor's runsc (failing instead under CI=true,
// where .ci/run installs it).
func needRunsc(t testing.TB) {
	t.Helper()
	if _, err := osexec.LookPath(RuntimeRunsc); err != nil {
		need.Missingf(t, "gVisor unavailable here (apt-get install runsc): %v", err)
	}
}

// The oci backend's own tests of a job's life — steps in one container,
// a timeout, graceful and immediate cancels, a background process that
// must not hold its step, jobs side by side — pass unchanged with the
// containers under gVisor.
// spec: SPEC-13
func TestGvisorRunsTheJobTests(t *testing.T) {
	needRunsc(t)
	t.Setenv("VK_TEST_OCI_RUNTIME", RuntimeRunsc)
	for name, test := range map[string]func(*testing.T){
		"StepsInOneContainer":          TestStepsInOneContainer,
		"TimeoutViaContext":            TestTimeoutViaContext,
		"Cancel":                       TestCancel,
		"BackgroundProcessDoesNotHold": TestBackgroundProcessDoesNotHoldStep,
		"ConcurrentJobs":               TestConcurrentJobs,
		"WhiteoutsInContainer":         TestWhiteoutsInContainer,
	} {
		t.Run(name, test)
	}
}

// Under runsc the job talks to gVisor's kernel, not the host's: the
// kernel it sees is not the host's, and it sees none of the host's
// processes. A job with services is refused as a configuration error
// (services are not run under gVisor yet).
func TestGvisorIsolatesTheJob(t *testing.T) {
	needRunsc(t)
	e := newEnv(t, func(c *Config) { c.Runtime = RuntimeRunsc })
	j := e.prepare(t, vkexec.Size{MemMiB: 128}, base)
	defer j.Cleanup(context.Background())
	hostKernel, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	out, _, res := run(t, j, context.Background(), `cat /proc/version; ls /proc | grep -c '^[0-9]'`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if res.ExitCode != 0 || len(lines) != 2 {
		t.Fatalf("%+v %q", res, out)
	}
	if lines[0] == strings.TrimSpace(string(hostKernel)) {
		t.Errorf("the job sees the host's kernel %q", lines[0])
	}
	var n int
	if _, err := fmt.Sscan(lines[1], &n); err != nil || n > 10 {
		t.Errorf("the job sees %s processes; want only its own few", lines[1])
	}
	_, err = e.tryPrepare(t, vkexec.Size{}, Spec{Image: base.Image, Services: []job.Image{{Name: "test/base:v1"}}})
	if !errors.Is(err, ErrConfig) {
		t.Errorf("services under runsc: %v, want ErrConfig", err)
	}
}

// BenchmarkStartRuncVsRunsc measures Prepare → first byte of a step's
// stdout for runc and runsc alternately in one run (image in the store),
// reporting each median and their ratio. Run with -benchtime=10x.
func BenchmarkStartRuncVsRunsc(b *testing.B) {
	needRunsc(b)
	envs := map[string]*env{
		RuntimeRunc:  newEnv(b, func(c *Config) { c.Runtime = RuntimeRunc }),
		RuntimeRunsc: newEnv(b, func(c *Config) { c.Runtime = RuntimeRunsc }),
	}
	spec := Spec{Image: job.Image{Name: "test/base:v1", PullPolicy: []string{"if-not-present"}}}
	ds := map[string][]time.Duration{}
	once := func(rt string, i int) {
		e := envs[rt]
		start := time.Now()
		j, err := e.exe.Prepare(context.Background(), vkexec.PrepareRequest{ID: fmt.Sprintf("bench-%s-%d-%d", rt, os.Getpid(), i), Size: vkexec.Size{MemMiB: 256, CPUs: 1}}, spec)
		if err != nil {
			b.Fatal(err)
		}
		fw := &firstWrite{}
		if _, err := j.Run(context.Background(), vkexec.Script{Name: "step", Body: "echo hi"}, fw, io.Discard); err != nil {
			b.Fatal(err)
		}
		ds[rt] = append(ds[rt], fw.at.Sub(start))
		if err := j.Cleanup(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	for _, rt := range []string{RuntimeRunc, RuntimeRunsc} { // warm the stores
		once(rt, -1)
		ds[rt] = nil
	}
	for i := 0; b.Loop(); i++ {
		once(RuntimeRunc, i)
		once(RuntimeRunsc, i)
	}
	med := func(rt string) float64 {
		s := slices.Clone(ds[rt])
		slices.Sort(s)
		return float64(s[len(s)/2]) / 1e6
	}
	b.ReportMetric(med(RuntimeRunc), "ms-runc-median")
	b.ReportMetric(med(RuntimeRunsc), "ms-runsc-median")
	b.ReportMetric(med(RuntimeRunsc)/med(RuntimeRunc), "runsc/runc")
}
