package boltstore

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/vk-ci/vk/hub/store"
	bolt "go.etcd.io/bbolt"
)

// AppendAudit implements [store.Audit.AppendAudit].
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	e.Time = utc(e.Time)
	return updateTx(ctx, s, func(tx *bolt.Tx) (store.AuditEntry, error) {
		b := tx.Bucket(bktAudit)
		seq, err := b.NextSequence()
		if err != nil {
			return store.AuditEntry{}, err
		}
		e.Seq = seq
		return e, putRec(b, binary.BigEndian.AppendUint64(nil, seq), e)
	})
}

// AppendAudits appends es in order in one transaction (the hub's record
// writer hands it the entries queued together).
func (s *Store) AppendAudits(ctx context.Context, es []store.AuditEntry) error {
	return s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktAudit)
		for _, e := range es {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			e.Seq, e.Time = seq, utc(e.Time)
			if err := putRec(b, binary.BigEndian.AppendUint64(nil, seq), e); err != nil {
				return err
			}
		}
		return nil
	})
}

// ListAudit implements [store.Audit.ListAudit]: it walks the sequence
// keys backwards, newest first, which [eachRec] does not.
func (s *Store) ListAudit(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	return viewTx(ctx, s, func(tx *bolt.Tx) ([]store.AuditEntry, error) {
		var out []store.AuditEntry
		c := tx.Bucket(bktAudit).Cursor()
		for k, v := c.Last(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Prev() {
			e, err := decode[store.AuditEntry](v, k, fixed("audit entry"))
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	})
}

// GetMeta implements [store.Meta.GetMeta].
func (s *Store) GetMeta(ctx context.Context, k string) ([]byte, error) {
	return viewTx(ctx, s, func(tx *bolt.Tx) ([]byte, error) {
		v := tx.Bucket(bktMeta).Get([]byte(k))
		if v == nil {
			return nil, fmt.Errorf("boltstore: meta %q: %w", k, store.ErrNotFound)
		}
		return append([]byte{}, v...), nil
	})
}

// PutMeta implements [store.Meta.PutMeta].
func (s *Store) PutMeta(ctx context.Context, k string, value []byte) error {
	if k == "" {
		return fmt.Errorf("boltstore: empty meta key: %w", store.ErrInvalid)
	}
	return s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bktMeta).Put([]byte(k), append([]byte{}, value...))
	})
}

// InitMeta implements [store.Meta.InitMeta].
func (s *Store) InitMeta(ctx context.Context, k string, value []byte) ([]byte, error) {
	if k == "" {
		return nil, fmt.Errorf("boltstore: empty meta key: %w", store.ErrInvalid)
	}
	return updateTx(ctx, s, func(tx *bolt.Tx) ([]byte, error) {
		b := tx.Bucket(bktMeta)
		if v := b.Get([]byte(k)); v != nil {
			return append([]byte{}, v...), nil
		}
		return append([]byte{}, value...), b.Put([]byte(k), append([]byte{}, value...))
	})
}
