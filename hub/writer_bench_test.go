package hub

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/boltstore"
	"github.com/vk-ci/vk/internal/testlog"
)

// BenchmarkRecWriter measures job record saves through the writer over
// bbolt when 64 jobs' saves are queued together, as a busy hub queues
// them: one at a time (the writer before batching) against in batches.
func BenchmarkRecWriter(b *testing.B) {
	for _, max := range []int{1, maxBatch} {
		b.Run(fmt.Sprintf("batch=%d", max), func(b *testing.B) {
			ctx := context.Background()
			st, err := boltstore.Open(ctx, filepath.Join(b.TempDir(), "hub.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			const jobs = 64
			for i := range jobs {
				if err := st.CreateJob(ctx, store.Job{ID: fmt.Sprint("job-", i), Revision: 1}); err != nil {
					b.Fatal(err)
				}
			}
			w := newRecWriter(ctx, st, testlog.New(b))
			defer w.close()
			w.max = max
			b.ResetTimer()
			for n := range b.N {
				chs := make([]<-chan error, jobs)
				for i := range jobs {
					chs[i] = w.saveJob(store.Job{ID: fmt.Sprint("job-", i), Revision: uint64(n + 2)})
				}
				for _, ch := range chs {
					if err := <-ch; err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*jobs)/b.Elapsed().Seconds(), "saves/s")
		})
	}
}
