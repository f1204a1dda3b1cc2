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
// them: one at a time (the writer before batching) against in batches,
// and in batches whose writes the store gathers into one commit; and the
// same for 4 jobs' saves queued together (a lifecycle's writes, roughly),
// with and without gathering. It reports saves/s.
func BenchmarkRecWriter(b *testing.B) {
	for _, c := range []struct {
		jobs, max int
		gather    bool
	}{{64, 1, false}, {64, maxBatch, false}, {64, maxBatch, true}, {4, maxBatch, false}, {4, maxBatch, true}} {
		name := fmt.Sprintf("batch=%d", c.max)
		if c.jobs != 64 || c.gather {
			name = fmt.Sprintf("jobs=%d/gather=%v", c.jobs, c.gather)
		}
		b.Run(name, func(b *testing.B) {
			jobs, max := c.jobs, c.max
			ctx := context.Background()
			st, err := boltstore.Open(ctx, filepath.Join(b.TempDir(), "hub.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			for i := range jobs {
				if err := st.CreateJob(ctx, store.Job{ID: fmt.Sprint("job-", i), Revision: 1}); err != nil {
					b.Fatal(err)
				}
			}
			w := newRecWriter(ctx, st, testlog.New(b))
			defer w.close()
			w.max, w.gather = max, c.gather
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
