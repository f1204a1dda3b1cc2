package boltstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/vk-ci/vk/hub/store"
	bolt "go.etcd.io/bbolt"
)

// CreateJob implements [store.Records.CreateJob].
func (s *Store) CreateJob(ctx context.Context, j store.Job) error {
	if err := checkJob(j); err != nil {
		return err
	}
	j.Created, j.Updated = utc(j.Created), utc(j.Updated)
	return s.update(ctx, func(tx *bolt.Tx) error {
		return putNew(tx.Bucket(bktJobs), []byte(j.ID), j, func() string { return "job " + j.ID })
	})
}

func checkJob(j store.Job) error {
	if j.ID == "" || hasNUL(j.ID) {
		return fmt.Errorf("boltstore: job without ID: %w", store.ErrInvalid)
	}
	return nil
}

// GetJob implements [store.Records.GetJob].
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	return viewRec[store.Job](ctx, s, bktJobs, []byte(id), func() string { return "job " + id })
}

// SaveJob implements [store.Records.SaveJob]: the stored record is
// looked up, not decoded.
func (s *Store) SaveJob(ctx context.Context, j store.Job) error {
	if err := checkJob(j); err != nil {
		return err
	}
	j.Created, j.Updated = utc(j.Created), utc(j.Updated)
	return s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktJobs)
		if b.Get([]byte(j.ID)) == nil {
			return fmt.Errorf("boltstore: job %s: %w", j.ID, store.ErrNotFound)
		}
		return putRec(b, []byte(j.ID), j)
	})
}

// UpdateJob implements [store.Records.UpdateJob].
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(*store.Job) error) (store.Job, error) {
	j, err := updateTx(ctx, s, func(tx *bolt.Tx) (store.Job, error) {
		b := tx.Bucket(bktJobs)
		j, err := getRec[store.Job](b, []byte(id), func() string { return "job " + id })
		if err != nil {
			return store.Job{}, err
		}
		if err := fn(&j); err != nil {
			return store.Job{}, err
		}
		if j.ID != id {
			return store.Job{}, fmt.Errorf("boltstore: update changed job ID %s to %s: %w", id, j.ID, store.ErrInvalid)
		}
		j.Created, j.Updated = utc(j.Created), utc(j.Updated)
		return j, putRec(b, []byte(id), j)
	})
	if err != nil {
		return store.Job{}, err
	}
	return j.Clone(), nil
}

// ListJobs implements [store.Records.ListJobs].
func (s *Store) ListJobs(ctx context.Context, unsettledOnly bool) ([]store.Job, error) {
	return listRecs(ctx, s, bktJobs, func(j store.Job) bool { return !unsettledOnly || !j.Settled }, keyed("job"))
}

// DeleteJob implements [store.Records.DeleteJob].
func (s *Store) DeleteJob(ctx context.Context, id string) error {
	return s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktJobs)
		if b.Get([]byte(id)) == nil {
			return fmt.Errorf("boltstore: job %s: %w", id, store.ErrNotFound)
		}
		if err := b.Delete([]byte(id)); err != nil {
			return err
		}
		idx, answers := tx.Bucket(bktAnswerJobs), tx.Bucket(bktAnswers)
		prefix := append([]byte(id), 0)
		var stale [][]byte
		c := idx.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			stale = append(stale, slices.Clone(k))
		}
		for _, k := range stale {
			ak := k[len(prefix):]
			a, ok, err := findRec[store.Answer](answers, ak)
			if err != nil {
				return err
			}
			if ok && a.Job == id {
				a.Dropped = true
				if err := putRec(answers, ak, a); err != nil {
					return err
				}
			}
			if err := idx.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// PutAdmission implements [store.Records.PutAdmission].
func (s *Store) PutAdmission(ctx context.Context, a store.Admission) error {
	if a.ID == "" {
		return fmt.Errorf("boltstore: admission without ID: %w", store.ErrInvalid)
	}
	a.ClaimedAt = utc(a.ClaimedAt)
	return s.update(ctx, func(tx *bolt.Tx) error {
		return putRec(tx.Bucket(bktAdmissions), []byte(a.ID), a)
	})
}

// GetAdmission implements [store.Records.GetAdmission].
func (s *Store) GetAdmission(ctx context.Context, id string) (store.Admission, error) {
	return viewRec[store.Admission](ctx, s, bktAdmissions, []byte(id), func() string { return "admission " + id })
}

// ListAdmissions implements [store.Records.ListAdmissions].
func (s *Store) ListAdmissions(ctx context.Context) ([]store.Admission, error) {
	return listRecs[store.Admission](ctx, s, bktAdmissions, nil, keyed("admission"))
}

// DeleteAdmission implements [store.Records.DeleteAdmission].
func (s *Store) DeleteAdmission(ctx context.Context, id string) error {
	return s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bktAdmissions).Delete([]byte(id))
	})
}
