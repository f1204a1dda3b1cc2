package vmfleet_test

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/microvmtest"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/internal/testfleet/fleettest"
	"github.com/vk-ci/vk/node"
	"github.com/vk-ci/vk/node/exec/microvm"
)

// A pipeline through the fleet on a node with [executor] backend =
// "microvm" (TCG here: this host's KVM cannot boot a stock guest). Three
// jobs, each in its own guest, two guests at a time:
//
//   - "build" runs in an image pushed to the fleet's registry, with a
//     service from the same image (alias web, busybox httpd) in a VM of
//     its own beside the job's, sized by the node's service_mem_mib: the
//     node waits for the service's exposed port, then the script fetches
//     a file from it by its alias; it reads a file only the image has and
//     the checkout the node pushed into the guest, and leaves an artifact
//     and a cache, which the node pulls out of the guest and uploads;
//   - "test" names no image (the initramfs guest, busybox): it gets the
//     build's artifact and the cache pushed into its guest;
//   - "oom", beside "test", asks for a 256 MiB guest (MICROVM_MEM) and
//     runs past it: the guest kernel's OOM killer kills the script's
//     process (never the agent), and the job fails as on the oci backend
//     — script_failure, exit status 137, the node's out-of-memory warning
//     naming the guest's 256 MiB on the trace.
//
// Build and test succeed, every GitLab trace equals the hub's stored
// output byte for byte, and the node's microvm directory holds only the
// initramfs and the image's cached disk afterwards.
//
// spec: STAGE-04, STAGE-07, STAGE-08, XFER-24, NODE-17
func TestMicroVMPipeline(t *testing.T) {
	fleettest.NeedBinaries(t, testfleet.RegistryBinary)
	agent := microvmtest.Agent(t)
	f := fleettest.Start(t, testfleet.Options{Caches: true, Nodes: []testfleet.NodeSpec{{Executor: node.BackendMicroVM}},
		Node: func(_ int, c *node.Config) {
			c.Executor.MicroVM = node.MicroVMConfig{Accel: microvm.AccelTCG, Agent: agent, BootTimeoutSecs: 300, DiskMiB: 128,
				ServiceMemMiB: 192, WaitForServicesTimeout: 120}
		}})
	n := f.Nodes()[0]
	reg := f.RegistryHost()
	img := reg + "/e2e/vm:v1"
	ocitest.Push(t, reg, "e2e/vm:v1", ocitest.Host(), map[string]any{
		"Env":          []string{"PATH=/bin"},
		"ExposedPorts": map[string]any{"8080/tcp": map[string]any{}},
	}, ocitest.Layer(t, append(ocitest.BaseFiles(t),
		ocitest.File{Name: "etc/vk-marker", Body: imageMarker + "\n"},
		ocitest.File{Name: "srv/", Typ: tar.TypeDir},
		ocitest.File{Name: "srv/hello.txt", Body: servedFile + "\n"})))

	tn := f.Tenants()[0]
	pl, err := tn.CreatePipeline("acme/vm", fleettest.Readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{
		{
			Name: "build", Stage: "build", Image: gitlabfake.Image{Name: img},
			Services: []gitlabfake.Image{{Name: img, Alias: "web", Command: []string{"httpd", "-f", "-p", "8080", "-h", "/srv"}}},
			Script: []string{
				"echo served=$(wget -qO- http://web:8080/hello.txt)",
				"echo image=$(cat /etc/vk-marker)", "echo readme=$(cat README.md)",
				"mkdir -p dist .cache && echo built-in-the-vm > dist/out.txt && echo cached-in-the-vm > .cache/c.txt",
			},
			Artifacts: []gitlabfake.Artifact{{Paths: []string{"dist"}}},
			Cache:     []gitlabfake.Cache{{Key: "vm", Paths: []string{".cache"}}},
		},
		{
			Name: "test", Stage: "test", Dependencies: []string{"build"},
			Script: []string{
				"if [ -e /etc/vk-marker ]; then echo in-the-image; exit 1; fi",
				"echo artifact=$(cat dist/out.txt)", "echo cache=$(cat .cache/c.txt)",
			},
			Cache: []gitlabfake.Cache{{Key: "vm", Paths: []string{".cache"}, Policy: "pull"}},
		},
		{
			Name: "oom", Stage: "test", Variables: []gitlabfake.Variable{{Key: "MICROVM_MEM", Value: "256"}},
			Script: []string{`echo "filling-$((128*2))-MiB"`, `awk 'BEGIN { s = "x"; while (1) s = s s }'`, "echo survived-the-oom"},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := fleettest.Timeout(t, 8*time.Minute)
	states, err := tn.WaitFinished(ctx, pl)
	if err != nil {
		t.Fatal(err)
	}
	for name, wants := range map[string][]string{
		"build": {"Using the microvm executor with bash...", "served=" + servedFile + "\n", "image=" + imageMarker + "\n", "readme=e2e\n",
			"Uploading artifacts as \"archive\" to coordinator... 201 Created"},
		"test": {"Using the microvm executor with bash...", "artifact=built-in-the-vm\n", "cache=cached-in-the-vm\n"},
	} {
		ji, err := tn.GitLab.Job(pl.Jobs[name])
		if err != nil {
			t.Fatal(err)
		}
		plain := fleettest.StripANSI(string(ji.Trace))
		if states[name] != gitlabfake.StateSuccess {
			t.Errorf("%s = %s (%q), want success:\n%s", name, states[name], ji.FailureReason, plain)
		}
		for _, w := range wants {
			if !strings.Contains(plain, w) {
				t.Errorf("%s trace lacks %q:\n%s", name, w, plain)
			}
		}
	}
	microvmOOM(t, tn, pl.Jobs["oom"], states["oom"])
	if tr := fleettest.StripANSI(string(tn.GitLab.Trace(pl.Jobs["build"]))); strings.Contains(tr, "probably didn't start properly") {
		t.Errorf("build: the service failed its health check:\n%s", tr)
	}
	fleettest.CheckTraces(t, ctx, tn, pl)
	ents, _ := os.ReadDir(filepath.Join(n.Dir, "microvm"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "disks initrd.cpio" {
		t.Errorf("the node's microvm directory after the jobs: %v, want the disks and the initramfs", names)
	}
}

// servedFile is a file of the test image that the build's service
// serves over HTTP.
const servedFile = "served-by-the-service-vm"

// microvmOOM checks how the "oom" job (id, ended in state) failed: as
// the oci backend reports an OOM — script_failure with exit status 137 and
// the node's warning naming the guest's memory — with the script's next
// command never run.
func microvmOOM(t *testing.T, tn *testfleet.Tenant, id int64, state gitlabfake.JobState) {
	t.Helper()
	ji, err := tn.GitLab.Job(id)
	if err != nil {
		t.Fatal(err)
	}
	plain := fleettest.StripANSI(string(ji.Trace))
	if state != gitlabfake.StateFailed || ji.FailureReason != "script_failure" {
		t.Errorf("oom = %s (%q), want failed script_failure:\n%s", state, ji.FailureReason, plain)
	}
	for _, w := range []string{"filling-256-MiB\n",
		"WARNING: step_script ran out of memory: a process was killed for using more than the job's 256 MiB\n",
		"ERROR: Job failed: exit status 137\n"} {
		if !strings.Contains(plain, w) {
			t.Errorf("oom trace lacks %q:\n%s", w, plain)
		}
	}
	if strings.Contains(plain, "survived-the-oom\n") {
		t.Errorf("oom: the script went on after the OOM kill:\n%s", plain)
	}
}
