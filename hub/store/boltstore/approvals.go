package boltstore

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/vk-ci/vk/hub/store"
	bolt "go.etcd.io/bbolt"
)

func approvalKey(instance string, project int64) []byte {
	k := append([]byte(instance), 0)
	return binary.BigEndian.AppendUint64(k, uint64(project)^(1<<63))
}

// PutApproval implements [store.Approvals.PutApproval].
func (s *Store) PutApproval(ctx context.Context, a store.Approval) error {
	if a.Instance == "" || hasNUL(a.Instance) {
		return fmt.Errorf("boltstore: approval without instance: %w", store.ErrInvalid)
	}
	a.Updated = utc(a.Updated)
	return s.update(ctx, func(tx *bolt.Tx) error {
		return putRec(tx.Bucket(bktApprovals), approvalKey(a.Instance, a.Project), a)
	})
}

// approvalCreate is CreateApproval's result under one type for [updateTx].
type approvalCreate struct {
	cur     store.Approval
	created bool
}

// CreateApproval implements [store.Approvals.CreateApproval]: the read and
// the write are one transaction. The approval already there is returned
// as stored, never merged with a.
func (s *Store) CreateApproval(ctx context.Context, a store.Approval) (store.Approval, bool, error) {
	if a.Instance == "" || hasNUL(a.Instance) {
		return store.Approval{}, false, fmt.Errorf("boltstore: approval without instance: %w", store.ErrInvalid)
	}
	a.Updated = utc(a.Updated)
	r, err := updateTx(ctx, s, func(tx *bolt.Tx) (approvalCreate, error) {
		b, k := tx.Bucket(bktApprovals), approvalKey(a.Instance, a.Project)
		cur, ok, err := findRec[store.Approval](b, k)
		if err != nil {
			return approvalCreate{cur, false}, err
		}
		if ok {
			if cur.Path != "" || a.Path == "" {
				return approvalCreate{cur, false}, nil
			}
			cur.Path = a.Path // decided ahead of the first sighting: learn the path
			return approvalCreate{cur, false}, putRec(b, k, cur)
		}
		return approvalCreate{a, true}, putRec(b, k, a)
	})
	return r.cur, r.created, err
}

// GetApproval implements [store.Approvals.GetApproval].
func (s *Store) GetApproval(ctx context.Context, instance string, project int64) (store.Approval, error) {
	return viewRec[store.Approval](ctx, s, bktApprovals, approvalKey(instance, project), func() string {
		return fmt.Sprintf("approval %s/%d", instance, project)
	})
}

// ListApprovals implements [store.Approvals.ListApprovals].
func (s *Store) ListApprovals(ctx context.Context) ([]store.Approval, error) {
	return listRecs[store.Approval](ctx, s, bktApprovals, nil, keyed("approval"))
}
