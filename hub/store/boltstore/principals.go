package boltstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/vk-ci/vk/hub/store"
	bolt "go.etcd.io/bbolt"
)

// CreatePrincipal implements [store.Principals.CreatePrincipal].
func (s *Store) CreatePrincipal(ctx context.Context, p store.Principal) error {
	if p.ID == "" {
		return fmt.Errorf("boltstore: principal without ID: %w", store.ErrInvalid)
	}
	p.Created, p.RemovedAt = utc(p.Created), utc(p.RemovedAt)
	return s.update(ctx, func(tx *bolt.Tx) error {
		return putNew(tx.Bucket(bktPrincipals), []byte(p.ID), p, func() string { return "principal " + p.ID })
	})
}

// GetPrincipal implements [store.Principals.GetPrincipal].
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	return viewRec[store.Principal](ctx, s, bktPrincipals, []byte(id), func() string { return "principal " + id })
}

// ListPrincipals implements [store.Principals.ListPrincipals].
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	return listRecs[store.Principal](ctx, s, bktPrincipals, nil, keyed("principal"))
}

// RemovePrincipal implements [store.Principals.RemovePrincipal].
func (s *Store) RemovePrincipal(ctx context.Context, id string, at time.Time) error {
	return s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktPrincipals)
		p, err := getRec[store.Principal](b, []byte(id), func() string { return "principal " + id })
		if err != nil || p.Removed {
			return err
		}
		p.Removed, p.RemovedAt = true, utc(at)
		return putRec(b, []byte(id), p)
	})
}

// CreateToken implements [store.Principals.CreateToken].
func (s *Store) CreateToken(ctx context.Context, tok store.Token) error {
	if tok.Hash == (store.Hash{}) {
		return fmt.Errorf("boltstore: token without hash: %w", store.ErrInvalid)
	}
	tok.Created, tok.Expires, tok.UsedAt = utc(tok.Created), utc(tok.Expires), utc(tok.UsedAt)
	return s.update(ctx, func(tx *bolt.Tx) error {
		return putNew(tx.Bucket(bktTokens), tok.Hash[:], tok, func() string { return "token" })
	})
}

// UseToken implements [store.Principals.UseToken].
func (s *Store) UseToken(ctx context.Context, h store.Hash, kind store.PrincipalKind, usedBy string, now time.Time) (store.Token, error) {
	return updateTx(ctx, s, func(tx *bolt.Tx) (store.Token, error) {
		b := tx.Bucket(bktTokens)
		tok, ok, err := findRec[store.Token](b, h[:])
		switch {
		case err != nil:
			return store.Token{}, err
		case !ok || tok.Kind != kind:
			return store.Token{}, fmt.Errorf("boltstore: token: %w", store.ErrNotFound)
		case tok.Used:
			return store.Token{}, fmt.Errorf("boltstore: token already used: %w", store.ErrConflict)
		case !now.Before(tok.Expires):
			return store.Token{}, fmt.Errorf("boltstore: token expired at %s: %w", tok.Expires, store.ErrExpired)
		}
		tok.Used, tok.UsedBy, tok.UsedAt = true, usedBy, utc(now)
		return tok, putRec(b, h[:], tok)
	})
}

// ListTokens implements [store.Principals.ListTokens]: keys are hashes, so
// the records are sorted by creation time after the read.
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	out, err := listRecs[store.Token](ctx, s, bktTokens, nil, fixed("token"))
	slices.SortStableFunc(out, func(a, b store.Token) int { return a.Created.Compare(b.Created) })
	return out, err
}
