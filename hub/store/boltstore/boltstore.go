// Package boltstore is the hub's default [store.Store]: one bbolt file in
// the state directory (the hub uses <state_dir>/hub.db), opened mode 0600
// and locked against a second hub process. Every write is one bbolt
// read-write transaction, fsynced before the method returns, so whatever a
// method reported as written survives a crash or restart (FAIL-19). Writes
// of concurrent callers that arrive while a commit is under way share the
// next transaction and its fsync (group commit); each caller still returns
// only once its own write is on disk. Principal records read are
// remembered (exactly: this Store is the file's only writer, see
// principalMemo), so the hub's lookup of every request's signer reads no
// file.
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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// principals remembers the principal records read (GetPrincipal).
	principals principalMemo
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
		err = s.group.update(run, slotOf(ctx))
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
