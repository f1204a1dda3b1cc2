package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/vk-ci/vk/hub/store"
)

// PutApproval implements [store.Approvals.PutApproval].
func (s *Store) PutApproval(ctx context.Context, a store.Approval) error {
	if a.Instance == "" {
		return fmt.Errorf("pgstore: approval without instance: %w", store.ErrInvalid)
	}
	a.Updated = utc(a.Updated)
	return s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO vk_approvals (instance, project, rec) VALUES ($1, $2, $3)
			ON CONFLICT (instance, project) DO UPDATE SET rec = excluded.rec`, a.Instance, a.Project, enc(a))
		return err
	})
}

// CreateApproval implements [store.Approvals.CreateApproval].
func (s *Store) CreateApproval(ctx context.Context, a store.Approval) (store.Approval, bool, error) {
	if a.Instance == "" {
		return store.Approval{}, false, fmt.Errorf("pgstore: approval without instance: %w", store.ErrInvalid)
	}
	a.Updated = utc(a.Updated)
	var (
		cur     store.Approval
		created bool
	)
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO vk_approvals (instance, project, rec) VALUES ($1, $2, $3)
			ON CONFLICT (instance, project) DO NOTHING`, a.Instance, a.Project, enc(a))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			cur, created = a, true
			return nil
		}
		cur, err = getRec[store.Approval](ctx, tx, "approval", "SELECT rec FROM vk_approvals WHERE instance = $1 AND project = $2 FOR UPDATE", a.Instance, a.Project)
		if err != nil || cur.Path != "" || a.Path == "" {
			return err
		}
		cur.Path = a.Path // decided ahead of the first sighting: learn the path
		_, err = tx.Exec(ctx, "UPDATE vk_approvals SET rec = $3 WHERE instance = $1 AND project = $2", a.Instance, a.Project, enc(cur))
		return err
	})
	if err != nil {
		return store.Approval{}, false, err
	}
	return cur, created, nil
}

// GetApproval implements [store.Approvals.GetApproval].
func (s *Store) GetApproval(ctx context.Context, instance string, project int64) (store.Approval, error) {
	return readRec[store.Approval](ctx, s, fmt.Sprintf("approval %s/%d", instance, project),
		"SELECT rec FROM vk_approvals WHERE instance = $1 AND project = $2", instance, project)
}

// ListApprovals implements [store.Approvals.ListApprovals].
func (s *Store) ListApprovals(ctx context.Context) ([]store.Approval, error) {
	return readRecs[store.Approval](ctx, s, "SELECT rec FROM vk_approvals ORDER BY instance COLLATE \"C\", project")
}
