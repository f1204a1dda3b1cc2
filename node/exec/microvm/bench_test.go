package microvm

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/node/exec"
)

// firstWrite notes when the first output byte arrived.
type firstWrite struct {
	once sync.Once
	at   time.Time
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { w.at = time.Now() })
	return len(p), nil
}

// BenchmarkStartToFirstOutput is the microvm backend's start, from
// Prepare to a step's first output byte, on the initramfs guest, beside
// node/exec/oci's benchmark of the same name (runc, runsc). It runs
// under VK_BENCH_ACCEL (kvm or tcg; default tcg, the only one that boots
// where KVM is nested PVM) and reports, besides the median and the
// maximum, the median breakdown: QEMU up (socket accepting), the guest
// kernel's own time to init, agent ready, and what the node adds after
// the agent's hello (the step's script start and first byte). Each op is
// one boot (seconds under TCG): run it with -benchtime 3x.
func BenchmarkStartToFirstOutput(b *testing.B) {
	accel := os.Getenv("VK_BENCH_ACCEL")
	if accel == "" {
		accel = AccelTCG
	}
	if err := Available("", ""); err != nil {
		b.Skip(err)
	}
	e, err := New(Config{Root: b.TempDir(), Agent: buildAgent(b), Accel: accel, BootTimeout: tcgBootTimeout})
	if err != nil {
		b.Fatal(err)
	}
	var total, qemu, kernel, ready, after []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		ji, err := e.Prepare(context.Background(), exec.PrepareRequest{ID: fmt.Sprintf("bench%d", i), Size: exec.Size{MemMiB: 256, CPUs: 1}})
		if err != nil {
			b.Fatal(err)
		}
		j := ji.(*Job)
		fw := &firstWrite{}
		if _, err := j.Run(context.Background(), exec.Script{Name: "step", Body: "echo hi"}, fw, io.Discard); err != nil {
			b.Fatal(err)
		}
		bt := j.Boot()
		first := fw.at.Sub(start)
		total, qemu, kernel, ready, after = append(total, first), append(qemu, bt.QEMU), append(kernel, bt.Kernel), append(ready, bt.Ready), append(after, first-bt.Ready)
		b.StopTimer()
		if err := j.Cleanup(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	med := func(ds []time.Duration) float64 {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return float64(ds[len(ds)/2]) / 1e6
	}
	b.ReportMetric(med(total), "ms-median")
	b.ReportMetric(float64(slices.Max(total))/1e6, "ms-max")
	b.ReportMetric(med(qemu), "ms-qemu-up")
	b.ReportMetric(med(kernel), "ms-kernel-to-init")
	b.ReportMetric(med(ready), "ms-agent-ready")
	b.ReportMetric(med(after), "ms-node-after-hello")
	b.Logf("accel %s", accel)
}
