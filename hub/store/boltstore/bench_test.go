package boltstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/vk-ci/vk/hub/store/boltstore"
	"github.com/vk-ci/vk/hub/store/storetest"
)

func benchStore(b *testing.B) *boltstore.Store {
	s, err := boltstore.Open(context.Background(), filepath.Join(b.TempDir(), "hub.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkCreateJob: one durable (fsynced) job record per op, ~1 KiB spec.
func BenchmarkCreateJob(b *testing.B) { storetest.BenchCreateJob(b, benchStore(b)) }

// BenchmarkSubmitRecords: a submission's job record and request_id
// answer per op, in one transaction (together) or two (apart).
func BenchmarkSubmitRecords(b *testing.B) {
	for _, together := range []bool{false, true} {
		name := map[bool]string{false: "apart", true: "together"}[together]
		b.Run(name, func(b *testing.B) { storetest.BenchSubmitRecords(b, benchStore(b), together) })
	}
}

// BenchmarkUpdateJob: one durable read-modify-write of a job per op.
func BenchmarkUpdateJob(b *testing.B) { storetest.BenchUpdateJob(b, benchStore(b)) }

// BenchmarkGetJob: one read of a job record per op.
func BenchmarkGetJob(b *testing.B) { storetest.BenchGetJob(b, benchStore(b)) }

// BenchmarkCreateJobParallel: durable job creates from 16 concurrent
// writers (GOMAXPROCS × 8), each waiting for its own fsync, with group
// commit ("group", the default) and with one transaction per write
// ("solo"), in one run.
func BenchmarkCreateJobParallel(b *testing.B) {
	for _, mode := range []string{"solo", "group"} {
		b.Run(mode, func(b *testing.B) {
			s := benchStore(b)
			boltstore.SetSolo(s, mode == "solo")
			ctx := context.Background()
			var next atomic.Int64
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				j := storetest.FullJob("x")
				j.Spec = make([]byte, 1024)
				for pb.Next() {
					j.ID = fmt.Sprintf("job-%08d", next.Add(1))
					if err := s.CreateJob(ctx, j); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}
