package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/hub/store/storetest"
	"github.com/vk-ci/vk/internal/pgtest"
)

// The same benchmarks as boltstore's, on a local cluster with fsync and
// synchronous commit on (pgtest.Durable): every write is durable before it
// returns, as bolt's are. Results: docs/benchmarks.md "hub/store".

func benchStore(b *testing.B, fenced bool) *pgstore.Store {
	srv := pgtest.Start(b, pgtest.Durable())
	s, err := pgstore.Open(context.Background(), srv.NewSchema(b), pgstore.Options{Fenced: fenced})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if fenced {
		l := pgstore.NewLease(s.Pool(), pgstore.LeaseConfig{Holder: "bench", TTL: time.Hour})
		epoch, _, ok, err := l.TryAcquire(context.Background())
		if err != nil || !ok {
			b.Fatalf("TryAcquire: %v %v", ok, err)
		}
		s.SetEpoch(epoch)
	}
	return s
}

func benchCreate(b *testing.B, fenced bool) {
	s := benchStore(b, fenced)
	ctx := context.Background()
	j := storetest.FullJob("x")
	j.Spec = make([]byte, 1024)
	i := 0
	for b.Loop() {
		j.ID = fmt.Sprintf("job-%08d", i)
		i++
		if err := s.CreateJob(ctx, j); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateJob: one durable job record per op, ~1 KiB spec.
func BenchmarkCreateJob(b *testing.B) { benchCreate(b, false) }

// BenchmarkCreateJobFenced: the same with the lease epoch checked in
// every write's transaction.
func BenchmarkCreateJobFenced(b *testing.B) { benchCreate(b, true) }

// BenchmarkUpdateJob: one durable read-modify-write of a job per op.
func BenchmarkUpdateJob(b *testing.B) {
	s := benchStore(b, false)
	ctx := context.Background()
	if err := s.CreateJob(ctx, storetest.FullJob("job-1")); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.UpdateJob(ctx, "job-1", func(j *store.Job) error { j.Revision++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetJob: one read of a job record per op.
func BenchmarkGetJob(b *testing.B) {
	s := benchStore(b, false)
	ctx := context.Background()
	if err := s.CreateJob(ctx, storetest.FullJob("job-1")); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.GetJob(ctx, "job-1"); err != nil {
			b.Fatal(err)
		}
	}
}
