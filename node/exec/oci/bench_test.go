package oci

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	vkexec "github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/proto/job"
)

// firstWrite records when its first byte arrives.
type firstWrite struct {
	once sync.Once
	at   time.Time
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.once.Do(func() { f.at = time.Now() })
	return len(p), nil
}

// BenchmarkStartToFirstOutput measures, with the image already in the
// store (pull_policy if-not-present), the time from Prepare (overlay,
// cgroup, bundle, `runc run -d` of the keeper) to the first byte of a
// step's stdout (`runc exec` of bash). Run with -benchtime=20x; it reports
// the median and the worst of the runs.
func BenchmarkStartToFirstOutput(b *testing.B) {
	e := newEnv(b, nil)
	spec := Spec{Image: job.Image{Name: "test/base:v1", PullPolicy: []string{"if-not-present"}}}
	warm, err := e.tryPrepare(b, vkexec.Size{MemMiB: 256, CPUs: 1}, spec)
	if err != nil {
		b.Fatal(err)
	}
	_ = warm.Cleanup(context.Background())
	var ds []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		j, err := e.exe.Prepare(context.Background(), vkexec.PrepareRequest{ID: fmt.Sprintf("bench%d-%d", os.Getpid(), i), Size: vkexec.Size{MemMiB: 256, CPUs: 1}}, spec)
		if err != nil {
			b.Fatal(err)
		}
		fw := &firstWrite{}
		if _, err := j.Run(context.Background(), vkexec.Script{Name: "step", Body: "echo hi"}, fw, io.Discard); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, fw.at.Sub(start))
		b.StopTimer()
		if err := j.Cleanup(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/1e6, "ms-median")
	b.ReportMetric(float64(ds[len(ds)-1])/1e6, "ms-max")
}
