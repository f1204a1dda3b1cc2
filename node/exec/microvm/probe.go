package microvm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vk-ci/vk/node/exec"
)

// DefaultProbeTimeout bounds the KVM probe: a guest under working KVM is
// ready in about a second; one that is not ready by then will not serve
// jobs well either.
const DefaultProbeTimeout = 5 * time.Second

// ProbeKVM boots one probe guest under KVM and reports nil only when its
// agent answered within timeout (0: [DefaultProbeTimeout]). The presence
// of /dev/kvm is not enough: under some nested virtualisation (PVM) a
// stock kernel hangs early in boot, and this probe then fails in time
// instead of every job hanging. cfg is the executor's configuration
// (Accel and BootTimeout are overridden); the probe leaves nothing
// behind.
func ProbeKVM(ctx context.Context, cfg Config, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return fmt.Errorf("%w: no /dev/kvm", ErrUnavailable)
	}
	cfg.Accel, cfg.BootTimeout = AccelKVM, timeout
	cfg.Root = filepath.Join(cfg.Root, "probe")
	defer os.RemoveAll(cfg.Root)
	e, err := New(cfg)
	if err != nil {
		return err
	}
	j, err := e.Prepare(ctx, exec.PrepareRequest{ID: "kvm-probe", Size: exec.Size{MemMiB: 128, CPUs: 1}})
	if err != nil {
		return fmt.Errorf("%w: a probe guest did not boot under KVM: %w", ErrUnavailable, err)
	}
	return j.Cleanup(ctx)
}
