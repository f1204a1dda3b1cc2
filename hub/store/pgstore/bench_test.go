package pgstore_test

import (
	"context"
	"testing"
	"time"

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
	storetest.BenchCreateJob(b, benchStore(b, fenced))
}

// BenchmarkCreateJob: one durable job record per op, ~1 KiB spec.
func BenchmarkCreateJob(b *testing.B) { benchCreate(b, false) }

// BenchmarkCreateJobFenced: the same with the lease epoch checked in
// every write's transaction.
func BenchmarkCreateJobFenced(b *testing.B) { benchCreate(b, true) }

// BenchmarkUpdateJob: one durable read-modify-write of a job per op.
func BenchmarkUpdateJob(b *testing.B) { storetest.BenchUpdateJob(b, benchStore(b, false)) }

// BenchmarkGetJob: one read of a job record per op.
func BenchmarkGetJob(b *testing.B) { storetest.BenchGetJob(b, benchStore(b, false)) }
