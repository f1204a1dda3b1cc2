package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/vk-ci/vk/hub/store"
)

// AppendAudit implements [store.Audit.AppendAudit].
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	e.Time = utc(e.Time)
	err := s.write(ctx, func(tx pgx.Tx) error {
		var seq int64
		if err := tx.QueryRow(ctx, "UPDATE vk_counters SET value = value + 1 WHERE name = 'audit' RETURNING value").Scan(&seq); err != nil {
			return err
		}
		e.Seq = uint64(seq)
		_, err := tx.Exec(ctx, "INSERT INTO vk_audit (seq, rec) VALUES ($1, $2)", seq, enc(e))
		return err
	})
	if err != nil {
		return store.AuditEntry{}, err
	}
	return e, nil
}

// ListAudit implements [store.Audit.ListAudit].
func (s *Store) ListAudit(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	var out []store.AuditEntry
	err := s.read(ctx, func(q querier) (err error) {
		lim := any(nil) // LIMIT NULL is no limit
		if limit > 0 {
			lim = limit
		}
		out, err = listRecs[store.AuditEntry](ctx, q, "SELECT rec FROM vk_audit ORDER BY seq DESC LIMIT $1", lim)
		return err
	})
	return out, err
}

// GetMeta implements [store.Meta.GetMeta].
func (s *Store) GetMeta(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := s.read(ctx, func(q querier) error {
		err := q.QueryRow(ctx, "SELECT value FROM vk_meta WHERE key = $1", key).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pgstore: meta %q: %w", key, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// PutMeta implements [store.Meta.PutMeta].
func (s *Store) PutMeta(ctx context.Context, key string, value []byte) error {
	if key == "" {
		return fmt.Errorf("pgstore: empty meta key: %w", store.ErrInvalid)
	}
	if value == nil {
		value = []byte{}
	}
	return s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO vk_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value", key, value)
		return err
	})
}

// InitMeta implements [store.Meta.InitMeta].
func (s *Store) InitMeta(ctx context.Context, key string, value []byte) ([]byte, error) {
	if key == "" {
		return nil, fmt.Errorf("pgstore: empty meta key: %w", store.ErrInvalid)
	}
	if value == nil {
		value = []byte{}
	}
	var v []byte
	err := s.write(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO vk_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING", key, value); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT value FROM vk_meta WHERE key = $1", key).Scan(&v)
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}
