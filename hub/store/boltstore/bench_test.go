package boltstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/vk-ci/vk/hub/store"
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
func BenchmarkCreateJob(b *testing.B) {
	s := benchStore(b)
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

// BenchmarkUpdateJob: one durable read-modify-write of a job per op.
func BenchmarkUpdateJob(b *testing.B) {
	s := benchStore(b)
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
	s := benchStore(b)
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
