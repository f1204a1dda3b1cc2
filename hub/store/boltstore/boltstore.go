// Package boltstore is the hub's default [store.Store]: one bbolt file in
// the state directory (the hub uses <state_dir>/hub.db), opened mode 0600
// and locked against a second hub process. Every write is one bbolt
// read-write transaction, fsynced before the method returns, so whatever a
// method reported as written survives a crash or restart (FAIL-19). Writes
// of concurrent callers that arrive while a commit is under way share the
// next transaction and its fsync (group commit); each caller still returns
// only once its own write is on disk.
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
//
// Every method has the same plumbing: refuse a done context or a closed
// store, run one bbolt transaction, get, decode, encode and put JSON
// records, and name a missing or taken record in its error. That plumbing
// lives once, in [viewTx], [updateTx], [getRec] (and [findRec],
// [viewRec]), [putRec], [putNew] and [listRecs] (over [eachRec]); the
// methods keep only what is their own (validation, normalisation, keys,
// the record's rules). testdata/layout.golden pins the keys and JSON the
// methods write, byte for byte, so a hub upgraded in place reads its old
// file.
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
	bolterr "go.etcd.io/bbolt/errors"
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
	group  *groupCommit // coalesces concurrent writes into one commit
	solo   bool         // every write its own commit (benchmarks compare)
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
		if errors.Is(err, bolterr.ErrTimeout) {
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
	return &Store{db: db, group: &groupCommit{db: db}}, nil
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

func (s *Store) mapErr(err error) error {
	if errors.Is(err, bolterr.ErrDatabaseNotOpen) {
		return fmt.Errorf("boltstore: %w", store.ErrClosed)
	}
	return err
}

// inTx runs fn in one transaction, read-write (committed and fsynced
// before inTx returns, possibly together with concurrent writes: see
// [groupCommit]) when writable, and returns what fn returns. If ctx
// is done or the store closed it returns that error without calling fn;
// on any error the value is T's zero value. An error of fn aborts (rolls
// back) the transaction and is returned as is.
func inTx[T any](ctx context.Context, s *Store, writable bool, fn func(*bolt.Tx) (T, error)) (T, error) {
	var out, zero T
	if err := s.check(ctx); err != nil {
		return zero, err
	}
	run := func(tx *bolt.Tx) error {
		var err error
		out, err = fn(tx)
		return err
	}
	var err error
	switch {
	case writable && s.solo:
		err = s.db.Update(run)
	case writable:
		err = s.group.update(run)
	default:
		err = s.db.View(run)
	}
	if err != nil {
		return zero, s.mapErr(err)
	}
	return out, nil
}

// viewTx is [inTx] in a read-only transaction.
func viewTx[T any](ctx context.Context, s *Store, fn func(*bolt.Tx) (T, error)) (T, error) {
	return inTx(ctx, s, false, fn)
}

// updateTx is [inTx] in a read-write transaction.
func updateTx[T any](ctx context.Context, s *Store, fn func(*bolt.Tx) (T, error)) (T, error) {
	return inTx(ctx, s, true, fn)
}

// update is [updateTx] for methods that return only an error.
func (s *Store) update(ctx context.Context, fn func(*bolt.Tx) error) error {
	_, err := updateTx(ctx, s, func(tx *bolt.Tx) (struct{}, error) { return struct{}{}, fn(tx) })
	return err
}

// decode unmarshals one stored record (raw, stored at key). A record that
// does not decode is T's zero value and an error "boltstore: decode
// <what(key)>: " wrapping the JSON error; what is called only then.
func decode[T any](raw, key []byte, what func(key []byte) string) (T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		var zero T
		return zero, fmt.Errorf("boltstore: decode %s: %w", what(key), err)
	}
	return v, nil
}

// keyed names a record in decode errors by kind and key: job "j1".
func keyed(kind string) func([]byte) string {
	return func(k []byte) string { return fmt.Sprintf("%s %q", kind, k) }
}

// fixed names a record in decode errors by kind alone, for binary keys
// (token hashes, audit sequence numbers) that say nothing to a reader.
func fixed(kind string) func([]byte) string { return func([]byte) string { return kind } }

// typeAt names a record in decode errors by Go type and key, as a
// single-record read does: *store.Job at "j1".
func typeAt[T any](k []byte) string { return fmt.Sprintf("%T at %q", (*T)(nil), k) }

// findRec returns the record stored at key in b, ok false (and T's zero
// value) when there is none. A record that does not decode is an error
// "boltstore: decode *T at <key>: …".
func findRec[T any](b *bolt.Bucket, key []byte) (v T, ok bool, err error) {
	raw := b.Get(key)
	if raw == nil {
		return v, false, nil
	}
	v, err = decode[T](raw, key, typeAt[T])
	return v, err == nil, err
}

// getRec is [findRec] for a record that must exist: a missing key is T's
// zero value and an error "boltstore: <what()>: " wrapping
// [store.ErrNotFound]; what names the record and is called only on a
// miss.
func getRec[T any](b *bolt.Bucket, key []byte, what func() string) (T, error) {
	v, ok, err := findRec[T](b, key)
	if err == nil && !ok {
		err = fmt.Errorf("boltstore: %s: %w", what(), store.ErrNotFound)
	}
	return v, err
}

// viewRec is [getRec] in a read-only transaction of its own, on bucket
// bkt: a whole Get method.
func viewRec[T any](ctx context.Context, s *Store, bkt, key []byte, what func() string) (T, error) {
	return viewTx(ctx, s, func(tx *bolt.Tx) (T, error) { return getRec[T](tx.Bucket(bkt), key, what) })
}

// putRec stores v, JSON-encoded, at key in b (replacing what is there).
func putRec(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("boltstore: encode: %w", err)
	}
	return b.Put(key, raw)
}

// putNew is [putRec] unless key is taken, when it stores nothing and
// returns an error "boltstore: <what()> exists: " wrapping
// [store.ErrConflict] (what is called only then).
func putNew(b *bolt.Bucket, key []byte, v any, what func() string) error {
	if b.Get(key) != nil {
		return fmt.Errorf("boltstore: %s exists: %w", what(), store.ErrConflict)
	}
	return putRec(b, key, v)
}

// eachRec decodes every record of b in key order and calls fn with its
// key (valid only during the transaction) and value. An error of fn, or
// a record that does not decode ("boltstore: decode <what(key)>: …"),
// stops the walk and is returned.
func eachRec[T any](b *bolt.Bucket, what func(key []byte) string, fn func(k []byte, v T) error) error {
	return b.ForEach(func(k, raw []byte) error {
		v, err := decode[T](raw, k, what)
		if err != nil {
			return err
		}
		return fn(k, v)
	})
}

// listRecs returns, in one read-only transaction, the records of bucket
// bkt that keep accepts (nil: all), in key order; nil when there are
// none, and nil with the error when one does not decode (see [eachRec]).
func listRecs[T any](ctx context.Context, s *Store, bkt []byte, keep func(T) bool, what func(key []byte) string) ([]T, error) {
	return viewTx(ctx, s, func(tx *bolt.Tx) ([]T, error) {
		var out []T
		err := eachRec(tx.Bucket(bkt), what, func(_ []byte, v T) error {
			if keep == nil || keep(v) {
				out = append(out, v)
			}
			return nil
		})
		return out, err
	})
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
		return putNew(tx.Bucket(bktJobs), []byte(j.ID), j, func() string { return "job " + j.ID })
	})
}

// GetJob implements [store.Store.GetJob].
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	return viewRec[store.Job](ctx, s, bktJobs, []byte(id), func() string { return "job " + id })
}

// UpdateJob implements [store.Store.UpdateJob].
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

// ListJobs implements [store.Store.ListJobs].
func (s *Store) ListJobs(ctx context.Context, unsettledOnly bool) ([]store.Job, error) {
	return listRecs(ctx, s, bktJobs, func(j store.Job) bool { return !unsettledOnly || !j.Settled }, keyed("job"))
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

// PutAdmission implements [store.Store.PutAdmission].
func (s *Store) PutAdmission(ctx context.Context, a store.Admission) error {
	if a.ID == "" {
		return fmt.Errorf("boltstore: admission without ID: %w", store.ErrInvalid)
	}
	a.ClaimedAt = utc(a.ClaimedAt)
	return s.update(ctx, func(tx *bolt.Tx) error {
		return putRec(tx.Bucket(bktAdmissions), []byte(a.ID), a)
	})
}

// GetAdmission implements [store.Store.GetAdmission].
func (s *Store) GetAdmission(ctx context.Context, id string) (store.Admission, error) {
	return viewRec[store.Admission](ctx, s, bktAdmissions, []byte(id), func() string { return "admission " + id })
}

// ListAdmissions implements [store.Store.ListAdmissions].
func (s *Store) ListAdmissions(ctx context.Context) ([]store.Admission, error) {
	return listRecs[store.Admission](ctx, s, bktAdmissions, nil, keyed("admission"))
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
		old, ok, err := findRec[store.Answer](b, k)
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
		return putRec(b, k, a)
	})
}

// GetAnswer implements [store.Store.GetAnswer].
func (s *Store) GetAnswer(ctx context.Context, principal, requestID string, now time.Time) (store.Answer, error) {
	what := func() string { return principal + "/" + requestID }
	a, err := viewRec[store.Answer](ctx, s, bktAnswers, key(principal, requestID), func() string { return "answer " + what() })
	if err != nil {
		return store.Answer{}, err
	}
	if a.Expired(now) {
		return a, fmt.Errorf("boltstore: answer %s: %w", what(), store.ErrExpired)
	}
	return a, nil
}

// PruneAnswers implements [store.Store.PruneAnswers]. It scans the
// answers, which hold about a day or two of creates.
func (s *Store) PruneAnswers(ctx context.Context, before time.Time) (int, error) {
	return updateTx(ctx, s, func(tx *bolt.Tx) (int, error) {
		b, idx := tx.Bucket(bktAnswers), tx.Bucket(bktAnswerJobs)
		var stale [][]byte
		var jobs []string
		err := eachRec(b, keyed("answer"), func(k []byte, a store.Answer) error {
			if a.Created.Before(before) {
				stale = append(stale, slices.Clone(k))
				jobs = append(jobs, a.Job)
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		for i, k := range stale {
			if err := b.Delete(k); err != nil {
				return 0, err
			}
			if jobs[i] != "" {
				if err := idx.Delete(append(append([]byte(jobs[i]), 0), k...)); err != nil {
					return 0, err
				}
			}
		}
		return len(stale), nil
	})
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
		return putRec(tx.Bucket(bktApprovals), approvalKey(a.Instance, a.Project), a)
	})
}

// approvalCreate is CreateApproval's result under one type for [updateTx].
type approvalCreate struct {
	cur     store.Approval
	created bool
}

// CreateApproval implements [store.Store.CreateApproval]: the read and
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

// GetApproval implements [store.Store.GetApproval].
func (s *Store) GetApproval(ctx context.Context, instance string, project int64) (store.Approval, error) {
	return viewRec[store.Approval](ctx, s, bktApprovals, approvalKey(instance, project), func() string {
		return fmt.Sprintf("approval %s/%d", instance, project)
	})
}

// ListApprovals implements [store.Store.ListApprovals].
func (s *Store) ListApprovals(ctx context.Context) ([]store.Approval, error) {
	return listRecs[store.Approval](ctx, s, bktApprovals, nil, keyed("approval"))
}

// CreatePrincipal implements [store.Store.CreatePrincipal].
func (s *Store) CreatePrincipal(ctx context.Context, p store.Principal) error {
	if p.ID == "" {
		return fmt.Errorf("boltstore: principal without ID: %w", store.ErrInvalid)
	}
	p.Created, p.RemovedAt = utc(p.Created), utc(p.RemovedAt)
	return s.update(ctx, func(tx *bolt.Tx) error {
		return putNew(tx.Bucket(bktPrincipals), []byte(p.ID), p, func() string { return "principal " + p.ID })
	})
}

// GetPrincipal implements [store.Store.GetPrincipal].
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	return viewRec[store.Principal](ctx, s, bktPrincipals, []byte(id), func() string { return "principal " + id })
}

// ListPrincipals implements [store.Store.ListPrincipals].
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	return listRecs[store.Principal](ctx, s, bktPrincipals, nil, keyed("principal"))
}

// RemovePrincipal implements [store.Store.RemovePrincipal].
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

// CreateToken implements [store.Store.CreateToken].
func (s *Store) CreateToken(ctx context.Context, tok store.Token) error {
	if tok.Hash == (store.Hash{}) {
		return fmt.Errorf("boltstore: token without hash: %w", store.ErrInvalid)
	}
	tok.Created, tok.Expires, tok.UsedAt = utc(tok.Created), utc(tok.Expires), utc(tok.UsedAt)
	return s.update(ctx, func(tx *bolt.Tx) error {
		return putNew(tx.Bucket(bktTokens), tok.Hash[:], tok, func() string { return "token" })
	})
}

// UseToken implements [store.Store.UseToken].
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

// ListTokens implements [store.Store.ListTokens]: keys are hashes, so
// the records are sorted by creation time after the read.
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	out, err := listRecs[store.Token](ctx, s, bktTokens, nil, fixed("token"))
	slices.SortStableFunc(out, func(a, b store.Token) int { return a.Created.Compare(b.Created) })
	return out, err
}

// AppendAudit implements [store.Store.AppendAudit].
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

// ListAudit implements [store.Store.ListAudit]: it walks the sequence
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

// GetMeta implements [store.Store.GetMeta].
func (s *Store) GetMeta(ctx context.Context, k string) ([]byte, error) {
	return viewTx(ctx, s, func(tx *bolt.Tx) ([]byte, error) {
		v := tx.Bucket(bktMeta).Get([]byte(k))
		if v == nil {
			return nil, fmt.Errorf("boltstore: meta %q: %w", k, store.ErrNotFound)
		}
		return append([]byte{}, v...), nil
	})
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
	return updateTx(ctx, s, func(tx *bolt.Tx) ([]byte, error) {
		b := tx.Bucket(bktMeta)
		if v := b.Get([]byte(k)); v != nil {
			return append([]byte{}, v...), nil
		}
		return append([]byte{}, value...), b.Put([]byte(k), append([]byte{}, value...))
	})
}
