package vmfleet_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/microvmtest"
	"github.com/vk-ci/vk/internal/ocitest"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/node"
	"github.com/vk-ci/vk/node/exec/microvm"
)

// A pipeline through the fleet on a node with [executor] backend =
// "microvm" (TCG here: this host's KVM cannot boot a stock guest). Two
// jobs, each in its own guest:
//
//   - "build" runs in an image pushed to the fleet's registry: it reads a
//     file only the image has and the checkout the node pushed into the
//     guest, and leaves an artifact and a cache, which the node pulls out
//     of the guest and uploads;
//   - "test" names no image (the initramfs guest, busybox): it gets the
//     build's artifact and the cache pushed into its guest.
//
// Both succeed, every GitLab trace equals the hub's stored output byte
// for byte, and the node's microvm directory holds only the initramfs and
// the image's cached disk afterwards.
//
// spec: STAGE-04, STAGE-08, XFER-24
func TestMicroVMPipeline(t *testing.T) {
	needBinaries(t, testfleet.RegistryBinary)
	agent := microvmtest.Agent(t)
	f := newFleet(t, testfleet.Options{Caches: true, Nodes: []testfleet.NodeSpec{{Executor: node.BackendMicroVM}},
		Node: func(_ int, c *node.Config) {
			c.Executor.MicroVM = node.MicroVMConfig{Accel: microvm.AccelTCG, Agent: agent, BootTimeoutSecs: 300, DiskMiB: 128}
		}})
	n := f.Nodes()[0]
	reg := f.RegistryHost()
	img := reg + "/e2e/vm:v1"
	ocitest.Push(t, reg, "e2e/vm:v1", ocitest.Host(), map[string]any{"Env": []string{"PATH=/bin"}},
		ocitest.Layer(t, append(ocitest.BaseFiles(t), ocitest.File{Name: "etc/vk-marker", Body: imageMarker + "\n"})))

	tn := f.Tenants()[0]
	pl, err := tn.CreatePipeline("acme/vm", readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{
		{
			Name: "build", Stage: "build", Image: gitlabfake.Image{Name: img},
			Script: []string{
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
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, 8*time.Minute)
	states, err := tn.WaitFinished(ctx, pl)
	if err != nil {
		t.Fatal(err)
	}
	for name, wants := range map[string][]string{
		"build": {"Using the microvm executor with bash...", "image=" + imageMarker + "\n", "readme=e2e\n", "Uploading artifacts as \"archive\" to coordinator... 201 Created"},
		"test":  {"Using the microvm executor with bash...", "artifact=built-in-the-vm\n", "cache=cached-in-the-vm\n"},
	} {
		ji, err := tn.GitLab.Job(pl.Jobs[name])
		if err != nil {
			t.Fatal(err)
		}
		plain := stripANSI(string(ji.Trace))
		if states[name] != gitlabfake.StateSuccess {
			t.Errorf("%s = %s (%q), want success:\n%s", name, states[name], ji.FailureReason, plain)
		}
		for _, w := range wants {
			if !strings.Contains(plain, w) {
				t.Errorf("%s trace lacks %q:\n%s", name, w, plain)
			}
		}
	}
	checkTraces(t, ctx, tn, pl)
	ents, _ := os.ReadDir(filepath.Join(n.Dir, "microvm"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "disks initrd.cpio" {
		t.Errorf("the node's microvm directory after the jobs: %v, want the disks and the initramfs", names)
	}
}
