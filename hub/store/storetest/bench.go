package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/vk-ci/vk/hub/store"
)

// The bodies of the store benchmarks every implementation runs, so their
// figures compare one for one (docs/benchmarks.md, "hub/store").

// BenchCreateJob stores one job record with a ~1 KiB spec per op.
func BenchCreateJob(b *testing.B, s store.Store) {
	ctx := context.Background()
	j := FullJob("x")
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

// BenchSubmitRecords stores what a submission's 201 waits for, per op: a
// job record (~1 KiB spec) and its request_id answer, in one
// CreateJobAnswered with together, else a CreateJob then a PutAnswer (the
// hub before issue 22: two durable writes).
func BenchSubmitRecords(b *testing.B, s store.Store, together bool) {
	ctx := context.Background()
	j := FullJob("x")
	j.Spec = make([]byte, 1024)
	a := store.Answer{Principal: "relay-1", Status: 201, Body: make([]byte, 200), Created: T0}
	i := 0
	for b.Loop() {
		j.ID, a.RequestID = fmt.Sprintf("job-%08d", i), fmt.Sprintf("%032x", i)
		a.Job = j.ID
		i++
		var err error
		if together {
			err = s.CreateJobAnswered(ctx, j, a)
		} else if err = s.CreateJob(ctx, j); err == nil {
			err = s.PutAnswer(ctx, a)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchUpdateJob makes one read-modify-write of a job per op.
func BenchUpdateJob(b *testing.B, s store.Store) {
	ctx := context.Background()
	if err := s.CreateJob(ctx, FullJob("job-1")); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.UpdateJob(ctx, "job-1", func(j *store.Job) error { j.Revision++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchGetJob reads one job record per op.
func BenchGetJob(b *testing.B, s store.Store) {
	ctx := context.Background()
	if err := s.CreateJob(ctx, FullJob("job-1")); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.GetJob(ctx, "job-1"); err != nil {
			b.Fatal(err)
		}
	}
}
