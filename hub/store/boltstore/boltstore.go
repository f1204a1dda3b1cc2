// Package boltstore is the hub's default [store.Store]: one bbolt file in
// the state directory (the hub uses <state_dir>/hub.db), opened mode 0600
// and locked against a second hub process. Every write is one bbolt
// read-write transaction, fsynced before the method returns, so whatever a
// method reported as written survives a crash or restart (FAIL-19).
//
// Locations for [store.Open]: a plain path, or "bolt:<path>".
//
// Layout: one bucket per record kind; values are JSON (the record types'
// tags), keys as below. NUL separates compound keys, so principal IDs,
// request_ids and instance names must not contain NUL (ErrInvalid).
//
//	vk           "schema" → "1"
//	jobs         job ID → Job
//	admissions   admission ID → Admission
//	answers      principal NUL request_id → Answer
//	answerjobs   job ID NUL principal NUL request_id → "" (index for DeleteJob)
//	approvals    instance NUL project (8 bytes, big-endian, sign-flipped) → Approval
//	principals   principal ID → Principal
//	tokens       SHA-256 (32 bytes) → Token
//	audit        sequence (8 bytes, big-endian) → AuditEntry
//	meta         key → raw bytes
//
// A file with another schema number is refused ([ErrSchema]).
package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vk-ci/vk/hub/store"
	bolt "go.etcd.io/bbolt"
)

func init() {
	open := func(ctx context.Context, path string) (store.Store, error) { return Open(ctx, path) }
	store.Register("", open)
	store.Register("bolt:", open)
}

// Schema is the on-disk format version this package reads and writes.
const Schema = "1"

// ErrSchema is returned (wrapped) by [Open] for a file of another schema.
var ErrSchema = errors.New("boltstore: unknown schema")

// ErrLocked is returned (wrapped) by [Open] when another process holds the
// file (another hub on the same state directory).
var ErrLocked = errors.New("boltstore: database locked by another process")

var (
	bktVK         = []byte("vk")
	bktJobs       = []byte("jobs")
	bktAdmissions = []byte("admissions")
	bktAnswers    = []byte("answers")
	bktAnswerJobs = []byte("answerjobs")
	bktApprovals  = []byte("approvals")
	bktPrincipals = []byte("principals")
	bktTokens     = []byte("tokens")
	bktAudit      = []byte("audit")
	bktMeta       = []byte("meta")
	allBuckets    = [][]byte{bktVK, bktJobs, bktAdmissions, bktAnswers, bktAnswerJobs, bktApprovals, bktPrincipals, bktTokens, bktAudit, bktMeta}
)

// Store is a bbolt-backed store.Store. Safe for concurrent use.
type Store struct {
	db     *bolt.DB
	closed atomic.Bool
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database file at path, creating its
// directory with mode 0700. It waits at most one second for the file lock.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("boltstore: empty path: %w", store.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("boltstore: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("boltstore: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, FreelistType: bolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		vk := tx.Bucket(bktVK)
		switch v := vk.Get([]byte("schema")); {
		case v == nil:
			return vk.Put([]byte("schema"), []byte(Schema))
		case string(v) != Schema:
			return fmt.Errorf("%w %q in %s (this hub reads %q)", ErrSchema, v, path, Schema)
		}
		return nil
	})
	if err != nil {
		db.Close()
		if errors.Is(err, ErrSchema) {
			return nil, err
		}
		return nil, fmt.Errorf("boltstore: init %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close implements [store.Store.Close]. Closing twice is not an error.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("boltstore: close: %w", err)
	}
	return nil
}

func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("boltstore: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("boltstore: %w", err)
	}
	return nil
}

func (s *Store) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.mapErr(s.db.View(fn))
}

func (s *Store) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.mapErr(s.db.Update(fn))
}

func (s *Store) mapErr(err error) error {
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		return fmt.Errorf("boltstore: %w", store.ErrClosed)
	}
	return err
}

func get(b *bolt.Bucket, key []byte, v any) (bool, error) {
	raw := b.Get(key)
	if raw == nil {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("boltstore: decode %T at %q: %w", v, key, err)
	}
	return true, nil
}

func put(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("boltstore: encode: %w", err)
	}
	return b.Put(key, raw)
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

func hasNUL(ss ...string) bool {
	for _, s := range ss {
		if strings.IndexByte(s, 0) >= 0 {
			return true
		}
	}
	return false
}

func key(parts ...string) []byte { return []byte(strings.Join(parts, "\x00")) }

// CreateJob implements [store.Store.CreateJob].
func (s *Store) CreateJob(ctx context.Context, j store.Job) error {
	if j.ID == "" || hasNUL(j.ID) {
		return fmt.Errorf("boltstore: job without ID: %w", store.ErrInvalid)
	}
	j.Created, j.Updated = utc(j.Created), utc(j.Updated)
	return s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktJobs)
		if b.Get([]byte(j.ID)) != nil {
			return fmt.Errorf("boltstore: job %s exists: %w", j.ID, store.ErrConflict)
		}
		return put(b, []byte(j.ID), j)
	})
}

// GetJob implements [store.Store.GetJob].
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	var j store.Job
	err := s.view(ctx, func(tx *bolt.Tx) error {
		ok, err := get(tx.Bucket(bktJobs), []byte(id), &j)
		if err == nil && !ok {
			err = fmt.Errorf("boltstore: job %s: %w", id, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return store.Job{}, err
	}
	return j, nil
}

// UpdateJob implements [store.Store.UpdateJob].
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(*store.Job) error) (store.Job, error) {
	var j store.Job
	err := s.update(ctx, func(tx *bolt.Tx) error {
		j = store.Job{}
		b := tx.Bucket(bktJobs)
		ok, err := get(b, []byte(id), &j)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("boltstore: job %s: %w", id, store.ErrNotFound)
		}
		if err := fn(&j); err != nil {
			return err
		}
		if j.ID != id {
			return fmt.Errorf("boltstore: update changed job ID %s to %s: %w", id, j.ID, store.ErrInvalid)
		}
		j.Created, j.Updated = utc(j.Created), utc(j.Updated)
		return put(b, []byte(id), j)
	})
	if err != nil {
		return store.Job{}, err
	}
	return j.Clone(), nil
}

// ListJobs implements [store.Store.ListJobs].
func (s *Store) ListJobs(ctx context.Context, unsettledOnly bool) ([]store.Job, error) {
	var out []store.Job
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bktJobs).ForEach(func(k, v []byte) error {
			var j store.Job
			if err := json.Unmarshal(v, &j); err != nil {
				return fmt.Errorf("boltstore: decode job %q: %w", k, err)
			}
			if !unsettledOnly || !j.Settled {
				out = append(out, j)
			}
			return nil
		})
	})
	return out, err
}

// DeleteJob implements [store.Store.DeleteJob].
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
			var a store.Answer
			ok, err := get(answers, ak, &a)
			if err != nil {
				return err
			}
			if ok && a.Job == id {
				a.Dropped = true
				if err := put(answers, ak, a); err != nil {
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

// PutAdmission implements [store.Store.PutAdmission].
func (s *Store) PutAdmission(ctx context.Context, a store.Admission) error {
	if a.ID == "" {
		return fmt.Errorf("boltstore: admission without ID: %w", store.ErrInvalid)
	}
	a.ClaimedAt = utc(a.ClaimedAt)
	return s.update(ctx, func(tx *bolt.Tx) error {
		return put(tx.Bucket(bktAdmissions), []byte(a.ID), a)
	})
}

// GetAdmission implements [store.Store.GetAdmission].
func (s *Store) GetAdmission(ctx context.Context, id string) (store.Admission, error) {
	var a store.Admission
	err := s.view(ctx, func(tx *bolt.Tx) error {
		ok, err := get(tx.Bucket(bktAdmissions), []byte(id), &a)
		if err == nil && !ok {
			err = fmt.Errorf("boltstore: admission %s: %w", id, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return store.Admission{}, err
	}
	return a, nil
}

// ListAdmissions implements [store.Store.ListAdmissions].
func (s *Store) ListAdmissions(ctx context.Context) ([]store.Admission, error) {
	var out []store.Admission
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bktAdmissions).ForEach(func(k, v []byte) error {
			var a store.Admission
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("boltstore: decode admission %q: %w", k, err)
			}
			out = append(out, a)
			return nil
		})
	})
	return out, err
}

// DeleteAdmission implements [store.Store.DeleteAdmission].
func (s *Store) DeleteAdmission(ctx context.Context, id string) error {
	return s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bktAdmissions).Delete([]byte(id))
	})
}

// PutAnswer implements [store.Store.PutAnswer].
func (s *Store) PutAnswer(ctx context.Context, a store.Answer) error {
	if a.Principal == "" || a.RequestID == "" || a.Created.IsZero() || hasNUL(a.Principal, a.RequestID, a.Job) {
		return fmt.Errorf("boltstore: answer without principal, request_id or time: %w", store.ErrInvalid)
	}
	a.Created = utc(a.Created)
	k := key(a.Principal, a.RequestID)
	return s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktAnswers)
		var old store.Answer
		ok, err := get(b, k, &old)
		if err != nil {
			return err
		}
		if ok && !old.Expired(a.Created) {
			return fmt.Errorf("boltstore: answer %s/%s exists: %w", a.Principal, a.RequestID, store.ErrConflict)
		}
		if ok && old.Job != "" {
			if err := tx.Bucket(bktAnswerJobs).Delete(key(old.Job, a.Principal, a.RequestID)); err != nil {
				return err
			}
		}
		if a.Job != "" && !a.Dropped {
			if err := tx.Bucket(bktAnswerJobs).Put(key(a.Job, a.Principal, a.RequestID), []byte{}); err != nil {
				return err
			}
		}
		return put(b, k, a)
	})
}

// GetAnswer implements [store.Store.GetAnswer].
func (s *Store) GetAnswer(ctx context.Context, principal, requestID string, now time.Time) (store.Answer, error) {
	var a store.Answer
	err := s.view(ctx, func(tx *bolt.Tx) error {
		ok, err := get(tx.Bucket(bktAnswers), key(principal, requestID), &a)
		if err == nil && !ok {
			err = fmt.Errorf("boltstore: answer %s/%s: %w", principal, requestID, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return store.Answer{}, err
	}
	if a.Expired(now) {
		return a, fmt.Errorf("boltstore: answer %s/%s: %w", principal, requestID, store.ErrExpired)
	}
	return a, nil
}

// PruneAnswers implements [store.Store.PruneAnswers]. It scans the
// answers, which hold about a day or two of creates.
func (s *Store) PruneAnswers(ctx context.Context, before time.Time) (int, error) {
	n := 0
	err := s.update(ctx, func(tx *bolt.Tx) error {
		n = 0
		b, idx := tx.Bucket(bktAnswers), tx.Bucket(bktAnswerJobs)
		var stale [][]byte
		var jobs []string
		err := b.ForEach(func(k, v []byte) error {
			var a store.Answer
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("boltstore: decode answer %q: %w", k, err)
			}
			if a.Created.Before(before) {
				stale = append(stale, slices.Clone(k))
				jobs = append(jobs, a.Job)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for i, k := range stale {
			if err := b.Delete(k); err != nil {
				return err
			}
			if jobs[i] != "" {
				if err := idx.Delete(append(append([]byte(jobs[i]), 0), k...)); err != nil {
					return err
				}
			}
		}
		n = len(stale)
		return nil
	})
	return n, err
}

func approvalKey(instance string, project int64) []byte {
	k := append([]byte(instance), 0)
	return binary.BigEndian.AppendUint64(k, uint64(project)^(1<<63))
}

// PutApproval implements [store.Store.PutApproval].
func (s *Store) PutApproval(ctx context.Context, a store.Approval) error {
	if a.Instance == "" || hasNUL(a.Instance) {
		return fmt.Errorf("boltstore: approval without instance: %w", store.ErrInvalid)
	}
	a.Updated = utc(a.Updated)
	return s.update(ctx, func(tx *bolt.Tx) error {
		return put(tx.Bucket(bktApprovals), approvalKey(a.Instance, a.Project), a)
	})
}

// CreateApproval implements [store.Store.CreateApproval]: the read and
// the write are one transaction.
func (s *Store) CreateApproval(ctx context.Context, a store.Approval) (store.Approval, bool, error) {
	if a.Instance == "" || hasNUL(a.Instance) {
		return store.Approval{}, false, fmt.Errorf("boltstore: approval without instance: %w", store.ErrInvalid)
	}
	a.Updated = utc(a.Updated)
	cur, created := a, false
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktApprovals)
		ok, err := get(b, approvalKey(a.Instance, a.Project), &cur)
		if err != nil || ok {
			return err
		}
		created = true
		return put(b, approvalKey(a.Instance, a.Project), a)
	})
	if err != nil {
		return store.Approval{}, false, err
	}
	return cur, created, nil
}

// GetApproval implements [store.Store.GetApproval].
func (s *Store) GetApproval(ctx context.Context, instance string, project int64) (store.Approval, error) {
	var a store.Approval
	err := s.view(ctx, func(tx *bolt.Tx) error {
		ok, err := get(tx.Bucket(bktApprovals), approvalKey(instance, project), &a)
		if err == nil && !ok {
			err = fmt.Errorf("boltstore: approval %s/%d: %w", instance, project, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return store.Approval{}, err
	}
	return a, nil
}

// ListApprovals implements [store.Store.ListApprovals].
func (s *Store) ListApprovals(ctx context.Context) ([]store.Approval, error) {
	var out []store.Approval
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bktApprovals).ForEach(func(k, v []byte) error {
			var a store.Approval
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("boltstore: decode approval %q: %w", k, err)
			}
			out = append(out, a)
			return nil
		})
	})
	return out, err
}

// CreatePrincipal implements [store.Store.CreatePrincipal].
func (s *Store) CreatePrincipal(ctx context.Context, p store.Principal) error {
	if p.ID == "" {
		return fmt.Errorf("boltstore: principal without ID: %w", store.ErrInvalid)
	}
	p.Created, p.RemovedAt = utc(p.Created), utc(p.RemovedAt)
	return s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktPrincipals)
		if b.Get([]byte(p.ID)) != nil {
			return fmt.Errorf("boltstore: principal %s exists: %w", p.ID, store.ErrConflict)
		}
		return put(b, []byte(p.ID), p)
	})
}

// GetPrincipal implements [store.Store.GetPrincipal].
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	var p store.Principal
	err := s.view(ctx, func(tx *bolt.Tx) error {
		ok, err := get(tx.Bucket(bktPrincipals), []byte(id), &p)
		if err == nil && !ok {
			err = fmt.Errorf("boltstore: principal %s: %w", id, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return store.Principal{}, err
	}
	return p, nil
}

// ListPrincipals implements [store.Store.ListPrincipals].
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	var out []store.Principal
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bktPrincipals).ForEach(func(k, v []byte) error {
			var p store.Principal
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("boltstore: decode principal %q: %w", k, err)
			}
			out = append(out, p)
			return nil
		})
	})
	return out, err
}

// RemovePrincipal implements [store.Store.RemovePrincipal].
func (s *Store) RemovePrincipal(ctx context.Context, id string, at time.Time) error {
	return s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktPrincipals)
		var p store.Principal
		ok, err := get(b, []byte(id), &p)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("boltstore: principal %s: %w", id, store.ErrNotFound)
		}
		if p.Removed {
			return nil
		}
		p.Removed, p.RemovedAt = true, utc(at)
		return put(b, []byte(id), p)
	})
}

// CreateToken implements [store.Store.CreateToken].
func (s *Store) CreateToken(ctx context.Context, tok store.Token) error {
	if tok.Hash == (store.Hash{}) {
		return fmt.Errorf("boltstore: token without hash: %w", store.ErrInvalid)
	}
	tok.Created, tok.Expires, tok.UsedAt = utc(tok.Created), utc(tok.Expires), utc(tok.UsedAt)
	return s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktTokens)
		if b.Get(tok.Hash[:]) != nil {
			return fmt.Errorf("boltstore: token exists: %w", store.ErrConflict)
		}
		return put(b, tok.Hash[:], tok)
	})
}

// UseToken implements [store.Store.UseToken].
func (s *Store) UseToken(ctx context.Context, h store.Hash, kind store.PrincipalKind, usedBy string, now time.Time) (store.Token, error) {
	var tok store.Token
	err := s.update(ctx, func(tx *bolt.Tx) error {
		tok = store.Token{}
		b := tx.Bucket(bktTokens)
		ok, err := get(b, h[:], &tok)
		switch {
		case err != nil:
			return err
		case !ok || tok.Kind != kind:
			return fmt.Errorf("boltstore: token: %w", store.ErrNotFound)
		case tok.Used:
			return fmt.Errorf("boltstore: token already used: %w", store.ErrConflict)
		case !now.Before(tok.Expires):
			return fmt.Errorf("boltstore: token expired at %s: %w", tok.Expires, store.ErrExpired)
		}
		tok.Used, tok.UsedBy, tok.UsedAt = true, usedBy, utc(now)
		return put(b, h[:], tok)
	})
	if err != nil {
		return store.Token{}, err
	}
	return tok, nil
}

// ListTokens implements [store.Store.ListTokens].
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	var out []store.Token
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bktTokens).ForEach(func(k, v []byte) error {
			var t store.Token
			if err := json.Unmarshal(v, &t); err != nil {
				return fmt.Errorf("boltstore: decode token: %w", err)
			}
			out = append(out, t)
			return nil
		})
	})
	slices.SortStableFunc(out, func(a, b store.Token) int { return a.Created.Compare(b.Created) })
	return out, err
}

// AppendAudit implements [store.Store.AppendAudit].
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	e.Time = utc(e.Time)
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktAudit)
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		e.Seq = seq
		return put(b, binary.BigEndian.AppendUint64(nil, seq), e)
	})
	if err != nil {
		return store.AuditEntry{}, err
	}
	return e, nil
}

// ListAudit implements [store.Store.ListAudit].
func (s *Store) ListAudit(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	var out []store.AuditEntry
	err := s.view(ctx, func(tx *bolt.Tx) error {
		c := tx.Bucket(bktAudit).Cursor()
		for k, v := c.Last(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Prev() {
			var e store.AuditEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("boltstore: decode audit entry: %w", err)
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// GetMeta implements [store.Store.GetMeta].
func (s *Store) GetMeta(ctx context.Context, k string) ([]byte, error) {
	var out []byte
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v := tx.Bucket(bktMeta).Get([]byte(k))
		if v == nil {
			return fmt.Errorf("boltstore: meta %q: %w", k, store.ErrNotFound)
		}
		out = append([]byte{}, v...)
		return nil
	})
	return out, err
}

// PutMeta implements [store.Store.PutMeta].
func (s *Store) PutMeta(ctx context.Context, k string, value []byte) error {
	if k == "" {
		return fmt.Errorf("boltstore: empty meta key: %w", store.ErrInvalid)
	}
	return s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bktMeta).Put([]byte(k), append([]byte{}, value...))
	})
}

// InitMeta implements [store.Store.InitMeta].
func (s *Store) InitMeta(ctx context.Context, k string, value []byte) ([]byte, error) {
	if k == "" {
		return nil, fmt.Errorf("boltstore: empty meta key: %w", store.ErrInvalid)
	}
	var out []byte
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bktMeta)
		if v := b.Get([]byte(k)); v != nil {
			out = append([]byte{}, v...)
			return nil
		}
		out = append([]byte{}, value...)
		return b.Put([]byte(k), append([]byte{}, value...))
	})
	return out, err
}
