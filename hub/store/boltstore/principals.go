package boltstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
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
	defer s.principals.forget(p.ID)
	return s.update(ctx, func(tx *bolt.Tx) error {
		return putNew(tx.Bucket(bktPrincipals), []byte(p.ID), p, func() string { return "principal " + p.ID })
	})
}

// GetPrincipal implements [store.Principals.GetPrincipal]. A principal
// read once is remembered (see [principalMemo]): the hub looks up the
// signer of every client API request, and the record changes only when
// it is removed, through this Store.
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	if err := s.check(ctx); err != nil {
		return store.Principal{}, err
	}
	if p, ok := s.principals.get(id); ok {
		return p, nil
	}
	gen := s.principals.generation()
	p, err := viewRec[store.Principal](ctx, s, bktPrincipals, []byte(id), func() string { return "principal " + id })
	if err == nil {
		s.principals.put(p, gen)
	}
	return p, err
}

// principalMemo remembers principal records read from the file, so that
// a request's signer costs no read transaction and no JSON decode. It is
// exact because this Store is the file's only writer (the file is locked
// against other processes, and every write to the principals bucket goes
// through [Store.CreatePrincipal] or [Store.RemovePrincipal], which
// forget the principal once their write committed, before they return):
// a removed relay's very next request reads the removal. A read that
// began before such a write cannot put back what it read: put stores a
// record only if no write forgot a principal since the read's generation
// was taken, before its transaction began. Principals are never deleted,
// so the memo holds at most one record per enrolled principal.
type principalMemo struct {
	mu  sync.Mutex
	gen uint64                     // bumped by every forget; guarded by mu
	m   map[string]store.Principal // by ID; guarded by mu
}

// get returns the remembered record of id (a copy), ok false if none.
func (pm *principalMemo) get(id string) (store.Principal, bool) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	p, ok := pm.m[id]
	return p.Clone(), ok
}

// generation is the count of forgets so far; take it before the read
// whose record is then passed to put.
func (pm *principalMemo) generation() uint64 {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	return pm.gen
}

// put remembers p (a copy), read in a transaction begun after gen was
// taken, unless a forget came since.
func (pm *principalMemo) put(p store.Principal, gen uint64) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if pm.gen != gen {
		return
	}
	if pm.m == nil {
		pm.m = map[string]store.Principal{}
	}
	pm.m[p.ID] = p.Clone()
}

// forget drops id's record and makes puts of reads begun before it void.
func (pm *principalMemo) forget(id string) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	pm.gen++
	delete(pm.m, id)
}

// ListPrincipals implements [store.Principals.ListPrincipals].
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	return listRecs[store.Principal](ctx, s, bktPrincipals, nil, keyed("principal"))
}

// RemovePrincipal implements [store.Principals.RemovePrincipal].
func (s *Store) RemovePrincipal(ctx context.Context, id string, at time.Time) error {
	// Forgotten after the commit (deferred calls run after the return
	// value is computed), whatever the write's outcome.
	defer s.principals.forget(id)
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
