package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/vk-ci/vk/hub/store"
)

// CreatePrincipal implements [store.Principals.CreatePrincipal].
func (s *Store) CreatePrincipal(ctx context.Context, p store.Principal) error {
	if p.ID == "" {
		return fmt.Errorf("pgstore: principal without ID: %w", store.ErrInvalid)
	}
	p.Created, p.RemovedAt = utc(p.Created), utc(p.RemovedAt)
	return s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "INSERT INTO vk_principals (id, rec) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING", p.ID, enc(p))
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("pgstore: principal %s exists: %w", p.ID, store.ErrConflict)
		}
		return err
	})
}

// GetPrincipal implements [store.Principals.GetPrincipal]. Unlike
// boltstore it remembers nothing and reads the row every time: another
// hub sharing the database may remove the principal, and this one must
// refuse the removed relay's very next request.
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	return readRec[store.Principal](ctx, s, "principal "+id, "SELECT rec FROM vk_principals WHERE id = $1", id)
}

// ListPrincipals implements [store.Principals.ListPrincipals].
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	return readRecs[store.Principal](ctx, s, "SELECT rec FROM vk_principals ORDER BY id COLLATE \"C\"")
}

// RemovePrincipal implements [store.Principals.RemovePrincipal].
func (s *Store) RemovePrincipal(ctx context.Context, id string, at store.Time) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		p, err := getRec[store.Principal](ctx, tx, "principal "+id, "SELECT rec FROM vk_principals WHERE id = $1 FOR UPDATE", id)
		if err != nil || p.Removed {
			return err
		}
		p.Removed, p.RemovedAt = true, utc(at)
		_, err = tx.Exec(ctx, "UPDATE vk_principals SET rec = $2 WHERE id = $1", id, enc(p))
		return err
	})
}

// CreateToken implements [store.Principals.CreateToken].
func (s *Store) CreateToken(ctx context.Context, tok store.Token) error {
	if tok.Hash == (store.Hash{}) {
		return fmt.Errorf("pgstore: token without hash: %w", store.ErrInvalid)
	}
	tok.Created, tok.Expires, tok.UsedAt = utc(tok.Created), utc(tok.Expires), utc(tok.UsedAt)
	// The hash is a secret's digest: errors do not name it.
	return s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "INSERT INTO vk_tokens (hash, created, rec) VALUES ($1, $2, $3) ON CONFLICT (hash) DO NOTHING", tok.Hash[:], nanos(tok.Created), enc(tok))
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("pgstore: token exists: %w", store.ErrConflict)
		}
		return err
	})
}

// UseToken implements [store.Principals.UseToken].
func (s *Store) UseToken(ctx context.Context, h store.Hash, kind store.PrincipalKind, usedBy string, now store.Time) (store.Token, error) {
	var out store.Token
	err := s.write(ctx, func(tx pgx.Tx) error {
		tok, err := getRec[store.Token](ctx, tx, "token", "SELECT rec FROM vk_tokens WHERE hash = $1 FOR UPDATE", h[:])
		switch {
		case err != nil:
			return err
		case tok.Kind != kind:
			return fmt.Errorf("pgstore: token: %w", store.ErrNotFound)
		case tok.Used:
			return fmt.Errorf("pgstore: token already used: %w", store.ErrConflict)
		case !now.Before(tok.Expires):
			return fmt.Errorf("pgstore: token expired at %s: %w", tok.Expires, store.ErrExpired)
		}
		tok.Used, tok.UsedBy, tok.UsedAt = true, usedBy, utc(now)
		if _, err := tx.Exec(ctx, "UPDATE vk_tokens SET rec = $2 WHERE hash = $1", h[:], enc(tok)); err != nil {
			return err
		}
		out = tok
		return nil
	})
	if err != nil {
		return store.Token{}, err
	}
	return out, nil
}

// ListTokens implements [store.Principals.ListTokens].
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	return readRecs[store.Token](ctx, s, "SELECT rec FROM vk_tokens ORDER BY created, hash")
}
