package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
)

// FullJob returns a job record with every field set.
func FullJob(id string) store.Job {
	return store.Job{
		ID: id, Principal: "relay-1", Runner: "r1", Tenant: "team-a", Instance: "main",
		Project: 12, GitLabJobID: 9001, Admission: "adm-" + id, Reservation: "res-" + id,
		Placement: "linux", RequestID: "00112233445566778899aabbccddeeff",
		State: store.JobRunning, Revision: 3, Node: "node-1", Stage: "step_script",
		OutputLen: 4096, Cancel: store.CancelGraceful, Result: []byte(`{"state":"success"}`),
		Spec:    []byte(`{"variables":[{"key":"TOKEN","value":"[MASKED]"}],  "x": 1}`),
		Created: T0, Updated: T0.Add(time.Second),
	}
}

// spec: FAIL-19, AUTH-07
func testJobs(t *testing.T, su suite[RecordsStore]) {
	s := su.open(t)
	ctx := su.ctx
	a, b, c := FullJob("job-b"), FullJob("job-a"), FullJob("job-c")
	c.Settled = true
	for _, j := range []store.Job{a, b, c} {
		wantErr(t, "CreateJob "+j.ID, s.CreateJob(ctx, j), nil)
	}
	wantErr(t, "CreateJob duplicate", s.CreateJob(ctx, a), store.ErrConflict)
	_, err := s.GetJob(ctx, "job-x")
	wantErr(t, "GetJob missing", err, store.ErrNotFound)
	_, err = s.UpdateJob(ctx, "job-x", func(*store.Job) error { return nil })
	wantErr(t, "UpdateJob missing", err, store.ErrNotFound)

	s = su.restart(t, s)
	got, err := s.GetJob(ctx, a.ID)
	wantErr(t, "GetJob", err, nil)
	diff(t, "GetJob", a, got)

	upd, err := s.UpdateJob(ctx, a.ID, func(j *store.Job) error {
		j.Revision++
		j.State = store.JobFinished
		j.Cancel = store.CancelImmediate
		j.Updated = T0.Add(time.Minute)
		return nil
	})
	wantErr(t, "UpdateJob", err, nil)
	want := a
	want.Revision, want.State, want.Cancel, want.Updated = 4, store.JobFinished, store.CancelImmediate, T0.Add(time.Minute)
	diff(t, "UpdateJob result", want, upd)

	boom := errors.New("boom")
	_, err = s.UpdateJob(ctx, a.ID, func(j *store.Job) error { j.Revision = 99; return boom })
	wantErr(t, "UpdateJob fn error", err, boom)
	_, err = s.UpdateJob(ctx, a.ID, func(j *store.Job) error { j.ID = "other"; return nil })
	wantErr(t, "UpdateJob changing ID", err, store.ErrInvalid)

	s = su.restart(t, s)
	got, _ = s.GetJob(ctx, a.ID)
	diff(t, "GetJob after update", want, got)

	all, err := s.ListJobs(ctx, false)
	wantErr(t, "ListJobs", err, nil)
	diff(t, "ListJobs IDs", []string{"job-a", "job-b", "job-c"}, jobIDs(all))
	uns, _ := s.ListJobs(ctx, true)
	diff(t, "ListJobs unsettled IDs", []string{"job-a", "job-b"}, jobIDs(uns))

	wantErr(t, "DeleteJob", s.DeleteJob(ctx, b.ID), nil)
	wantErr(t, "DeleteJob again", s.DeleteJob(ctx, b.ID), store.ErrNotFound)
	s = su.restart(t, s)
	_, err = s.GetJob(ctx, b.ID)
	wantErr(t, "GetJob deleted", err, store.ErrNotFound)
	all, _ = s.ListJobs(ctx, false)
	diff(t, "ListJobs after delete", []string{"job-b", "job-c"}, jobIDs(all))
}

func jobIDs(js []store.Job) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}

// spec: AUTH-07
// The store keeps exactly the bytes it is given: a caller changing its
// slices afterwards, or the slices it got back, changes nothing stored.
func testJobCopies(t *testing.T, su suite[RecordsStore]) {
	s := su.open(t)
	ctx := su.ctx
	j := FullJob("job-1")
	orig := j.Clone()
	wantErr(t, "CreateJob", s.CreateJob(ctx, j), nil)
	j.Spec[0], j.Result[0] = 'X', 'X'
	got, _ := s.GetJob(ctx, "job-1")
	diff(t, "after caller mutation", orig, got)
	got.Spec[0] = 'Y'
	got2, _ := s.GetJob(ctx, "job-1")
	diff(t, "after result mutation", orig, got2)
	var kept *store.Job
	_, err := s.UpdateJob(ctx, "job-1", func(j *store.Job) error { kept = j; return nil })
	wantErr(t, "UpdateJob", err, nil)
	kept.Spec[0] = 'Z'
	got3, _ := s.GetJob(ctx, "job-1")
	diff(t, "after fn pointer mutation", orig, got3)
}

// spec: FAIL-19
// SaveJob replaces an existing record as a whole (what the hub's record
// writer saves), durable across a restart; it never creates a job, so a
// deleted job stays deleted; the record is the store's own copy.
func testJobSave(t *testing.T, su suite[RecordsStore]) {
	s := su.open(t)
	ctx := su.ctx
	a := FullJob("job-a")
	wantErr(t, "SaveJob missing", s.SaveJob(ctx, a), store.ErrNotFound)
	_, err := s.GetJob(ctx, a.ID)
	wantErr(t, "GetJob after SaveJob missing", err, store.ErrNotFound)
	wantErr(t, "SaveJob without ID", s.SaveJob(ctx, store.Job{}), store.ErrInvalid)
	wantErr(t, "CreateJob", s.CreateJob(ctx, a), nil)

	want := FullJob("job-a")
	want.State, want.Revision, want.Settled, want.Result = store.JobFinished, 7, true, []byte(`{"exit_code":0}`)
	want.Stage, want.Updated = "", T0.Add(time.Hour)
	saved := want.Clone()
	wantErr(t, "SaveJob", s.SaveJob(ctx, saved), nil)
	saved.Spec[0], saved.Result[0] = 'X', 'X'
	got, err := s.GetJob(ctx, a.ID)
	wantErr(t, "GetJob", err, nil)
	diff(t, "GetJob after SaveJob", want, got)
	s = su.restart(t, s)
	got, _ = s.GetJob(ctx, a.ID)
	diff(t, "GetJob after SaveJob and a restart", want, got)
	uns, _ := s.ListJobs(ctx, true)
	diff(t, "ListJobs unsettled after saving settled", []string(nil), jobIDs(uns))

	wantErr(t, "DeleteJob", s.DeleteJob(ctx, a.ID), nil)
	wantErr(t, "SaveJob deleted", s.SaveJob(ctx, want), store.ErrNotFound)
	_, err = s.GetJob(ctx, a.ID)
	wantErr(t, "GetJob after SaveJob deleted", err, store.ErrNotFound)
}

// UpdateJob is an atomic read-modify-write: concurrent increments are
// never lost.
func testJobUpdateConcurrent(t *testing.T, su suite[RecordsStore]) {
	s := su.open(t)
	ctx := su.ctx
	j := FullJob("job-1")
	j.Revision = 0
	wantErr(t, "CreateJob", s.CreateJob(ctx, j), nil)
	const workers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				if _, err := s.UpdateJob(ctx, "job-1", func(j *store.Job) error { j.Revision++; return nil }); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, _ := s.GetJob(ctx, "job-1")
	if got.Revision != workers*each {
		t.Fatalf("revision %d after %d increments", got.Revision, workers*each)
	}
}

// spec: FAIL-19
// Claimed admissions survive a restart so the hub can adopt them
// (DECISIONS 6).
func testAdmissions(t *testing.T, su suite[RecordsStore]) {
	s := su.open(t)
	ctx := su.ctx
	a := store.Admission{ID: "adm-2", Reservation: "res-2", Node: "node-1", Relay: "relay-1", Runner: "r1", Tenant: "team-a", Placement: "linux", ClaimedAt: T0}
	b := a
	b.ID, b.Reservation = "adm-1", "res-1"
	wantErr(t, "PutAdmission", s.PutAdmission(ctx, a), nil)
	wantErr(t, "PutAdmission", s.PutAdmission(ctx, b), nil)
	a.Job = "job-9"
	wantErr(t, "PutAdmission replace", s.PutAdmission(ctx, a), nil)
	s = su.restart(t, s)
	got, err := s.GetAdmission(ctx, "adm-2")
	wantErr(t, "GetAdmission", err, nil)
	diff(t, "GetAdmission", a, got)
	all, _ := s.ListAdmissions(ctx)
	diff(t, "ListAdmissions", []store.Admission{b, a}, all)
	wantErr(t, "DeleteAdmission", s.DeleteAdmission(ctx, "adm-1"), nil)
	wantErr(t, "DeleteAdmission absent", s.DeleteAdmission(ctx, "adm-1"), nil)
	s = su.restart(t, s)
	_, err = s.GetAdmission(ctx, "adm-1")
	wantErr(t, "GetAdmission deleted", err, store.ErrNotFound)
	all, _ = s.ListAdmissions(ctx)
	diff(t, "ListAdmissions after delete", []store.Admission{a}, all)
}

// Records without their key fields are refused.
func testRecordsInvalid(t *testing.T, su suite[RecordsStore]) {
	s := su.open(t)
	wantErr(t, "CreateJob no ID", s.CreateJob(su.ctx, store.Job{}), store.ErrInvalid)
	wantErr(t, "PutAdmission no ID", s.PutAdmission(su.ctx, store.Admission{}), store.ErrInvalid)
}
