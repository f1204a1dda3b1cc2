package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/vk-ci/vk/hub/store"
)

func normJob(j store.Job) store.Job {
	j.Created, j.Updated = utc(j.Created), utc(j.Updated)
	return j
}

// CreateJob implements [store.Records.CreateJob].
func (s *Store) CreateJob(ctx context.Context, j store.Job) error {
	if j.ID == "" {
		return fmt.Errorf("pgstore: job without ID: %w", store.ErrInvalid)
	}
	j = normJob(j)
	return s.write(ctx, func(tx pgx.Tx) error { return insertJob(ctx, tx, j) })
}

// insertJob inserts j's row in tx; ErrConflict if its ID exists.
func insertJob(ctx context.Context, tx pgx.Tx, j store.Job) error {
	tag, err := tx.Exec(ctx, "INSERT INTO vk_jobs (id, settled, rec) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING", j.ID, j.Settled, enc(j))
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("pgstore: job %s exists: %w", j.ID, store.ErrConflict)
	}
	return err
}

// GetJob implements [store.Records.GetJob].
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	return readRec[store.Job](ctx, s, "job "+id, "SELECT rec FROM vk_jobs WHERE id = $1", id)
}

// UpdateJob implements [store.Records.UpdateJob]. The row is locked, so fn
// runs once.
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(*store.Job) error) (store.Job, error) {
	var out store.Job
	err := s.write(ctx, func(tx pgx.Tx) error {
		j, err := getRec[store.Job](ctx, tx, "job "+id, "SELECT rec FROM vk_jobs WHERE id = $1 FOR UPDATE", id)
		if err != nil {
			return err
		}
		if err := fn(&j); err != nil {
			return err
		}
		if j.ID != id {
			return fmt.Errorf("pgstore: update changed job ID %s to %s: %w", id, j.ID, store.ErrInvalid)
		}
		j = normJob(j)
		rec := enc(j)
		if _, err := tx.Exec(ctx, "UPDATE vk_jobs SET settled = $2, rec = $3 WHERE id = $1", id, j.Settled, rec); err != nil {
			return err
		}
		out, err = dec[store.Job](rec) // the caller's own copy
		return err
	})
	if err != nil {
		return store.Job{}, err
	}
	return out, nil
}

// SaveJob implements [store.Records.SaveJob]: one UPDATE, no read of the
// row it replaces.
func (s *Store) SaveJob(ctx context.Context, j store.Job) error {
	if j.ID == "" {
		return fmt.Errorf("pgstore: job without ID: %w", store.ErrInvalid)
	}
	j = normJob(j)
	rec := enc(j)
	return s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "UPDATE vk_jobs SET settled = $2, rec = $3 WHERE id = $1", j.ID, j.Settled, rec)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("pgstore: job %s: %w", j.ID, store.ErrNotFound)
		}
		return nil
	})
}

// ListJobs implements [store.Records.ListJobs].
func (s *Store) ListJobs(ctx context.Context, unsettledOnly bool) ([]store.Job, error) {
	return readRecs[store.Job](ctx, s, "SELECT rec FROM vk_jobs WHERE NOT (settled AND $1) ORDER BY id COLLATE \"C\"", unsettledOnly)
}

// DeleteJob implements [store.Records.DeleteJob].
func (s *Store) DeleteJob(ctx context.Context, id string) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "DELETE FROM vk_jobs WHERE id = $1", id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("pgstore: job %s: %w", id, store.ErrNotFound)
		}
		_, err = tx.Exec(ctx, "UPDATE vk_answers SET dropped = true WHERE job = $1 AND job <> ''", id)
		return err
	})
}

// PutAdmission implements [store.Records.PutAdmission].
func (s *Store) PutAdmission(ctx context.Context, a store.Admission) error {
	if a.ID == "" {
		return fmt.Errorf("pgstore: admission without ID: %w", store.ErrInvalid)
	}
	a.ClaimedAt = utc(a.ClaimedAt)
	return s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO vk_admissions (id, rec) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET rec = excluded.rec", a.ID, enc(a))
		return err
	})
}

// GetAdmission implements [store.Records.GetAdmission].
func (s *Store) GetAdmission(ctx context.Context, id string) (store.Admission, error) {
	return readRec[store.Admission](ctx, s, "admission "+id, "SELECT rec FROM vk_admissions WHERE id = $1", id)
}

// ListAdmissions implements [store.Records.ListAdmissions].
func (s *Store) ListAdmissions(ctx context.Context) ([]store.Admission, error) {
	return readRecs[store.Admission](ctx, s, "SELECT rec FROM vk_admissions ORDER BY id COLLATE \"C\"")
}

// DeleteAdmission implements [store.Records.DeleteAdmission].
func (s *Store) DeleteAdmission(ctx context.Context, id string) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "DELETE FROM vk_admissions WHERE id = $1", id)
		return err
	})
}
