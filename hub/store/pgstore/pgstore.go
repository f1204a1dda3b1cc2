// Package pgstore is a [store.Store] on PostgreSQL (location
// "postgres:<dsn>"), for a hub whose state must outlive its machine
// (docs/ha.md). It passes hub/store/storetest like boltstore, keeps job
// output too ([Output], an output.Store passing hub/output's tests), and
// holds the leader lease ([Lease]) whose epoch fences every write.
//
// Records are kept as the JSON of their Go struct in a bytea column, byte
// for byte, with key columns beside them for lookups, ordering and
// pruning. Every method is one transaction; a read-modify-write locks its
// row (SELECT … FOR UPDATE), so the functions passed to UpdateJob are
// called exactly once.
//
// # Schema
//
// The schema is versioned by the numbered SQL files embedded from
// migrations/. [Open] applies those the database lacks, all in one
// transaction under an advisory lock (two hubs starting together migrate
// once), and refuses to start on a database whose schema is newer than
// this binary knows ([ErrSchemaNewer]): an older hub must not write rows
// a newer one would misread.
//
// # Fencing
//
// A store opened with [Options.Fenced] writes only with the epoch it was
// given by [Store.SetEpoch] (the epoch of the lease its hub holds): every
// write first reads the lease row FOR SHARE in the same transaction and
// fails with [ErrFenced] if the row's epoch is not its own. A lease
// holder taking over updates that row, so it waits for writes already
// past the check to commit, and every later write sees the new epoch: a
// deposed leader that keeps running writes nothing. Without Fenced (one
// hub on PostgreSQL, no standby) writes are not checked.
package pgstore

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vk-ci/vk/hub/store"
)

func init() {
	store.Register("postgres:", func(ctx context.Context, dsn string) (store.Store, error) {
		return Open(ctx, dsn, Options{})
	})
}

// Errors. Returned wrapped; test with errors.Is.
var (
	// ErrFenced: a fenced write was refused because the lease has a newer
	// epoch than the writer's (or the writer holds none).
	ErrFenced = errors.New("pgstore: write fenced: not the current leader")
	// ErrSchemaNewer: the database's schema is newer than this binary's.
	ErrSchemaNewer = errors.New("pgstore: database schema is newer than this binary knows")
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one numbered schema step.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations ordered by version; the
// versions are 1, 2, … without gaps (checked by a test).
func migrations() []migration {
	ents, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		panic(err)
	}
	var out []migration
	for _, e := range ents {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic("pgstore: migration file without a number: " + e.Name())
		}
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			panic(err)
		}
		out = append(out, migration{v, e.Name(), string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out
}

// SchemaVersion is the newest schema this binary knows.
func SchemaVersion() int { m := migrations(); return m[len(m)-1].version }

// Options tune [Open].
type Options struct {
	// Fenced makes every write check the lease epoch ([Store.SetEpoch]);
	// until an epoch is set, every write is refused.
	Fenced bool
	// MaxConns bounds the connection pool; 0 means pgxpool's default.
	MaxConns int32
}

// Store is a [store.Store] on PostgreSQL. Safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	fenced  bool
	epoch   atomic.Uint64
	refused atomic.Int64
	closed  atomic.Bool
	once    sync.Once
}

var _ store.Store = (*Store)(nil)

// Open connects to the database named by dsn (a libpq connection string
// or URL), migrates its schema and returns the store.
func Open(ctx context.Context, dsn string, opt Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgstore: dsn: %w", err)
	}
	if opt.MaxConns > 0 {
		cfg.MaxConns = opt.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return &Store{pool: pool, fenced: opt.Fenced}, nil
}

// migrateLock is the advisory lock key held while migrating.
const migrateLock = 0x766b5f736368656d // "vk_schem"

func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	ms := migrations()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLock)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS vk_schema (
			version integer PRIMARY KEY, name text NOT NULL, applied timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM vk_schema").Scan(&have); err != nil {
			return err
		}
		if known := ms[len(ms)-1].version; have > known {
			return fmt.Errorf("%w: database at version %d, this binary knows up to %d", ErrSchemaNewer, have, known)
		}
		for _, m := range ms {
			if m.version <= have {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO vk_schema (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrSchemaNewer) {
		return fmt.Errorf("pgstore: schema: %w", err)
	}
	return err
}

// Pool is the store's connection pool ([Lease] and the output store
// share it).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// SetEpoch sets the lease epoch this store's writes are fenced with.
func (s *Store) SetEpoch(epoch uint64) { s.epoch.Store(epoch) }

// Refused returns how many writes were refused with [ErrFenced].
func (s *Store) Refused() int64 { return s.refused.Load() }

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %w", store.ErrClosed)
	}
	return nil
}

// fence checks, inside tx, that this store's epoch is the lease's.
func (s *Store) fence(ctx context.Context, tx pgx.Tx) error {
	if !s.fenced {
		return nil
	}
	mine := s.epoch.Load()
	var cur int64
	if err := tx.QueryRow(ctx, "SELECT epoch FROM vk_lease WHERE name = 'leader' FOR SHARE").Scan(&cur); err != nil {
		return err
	}
	if mine == 0 || uint64(cur) != mine {
		s.refused.Add(1)
		return fmt.Errorf("%w (writer's epoch %d, lease's %d)", ErrFenced, mine, cur)
	}
	return nil
}

// write runs fn in a transaction that first passes the fence.
func (s *Store) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.fence(ctx, tx); err != nil {
			return err
		}
		return fn(tx)
	})
	return s.wrap(err)
}

// wrap adds the package prefix to database errors; the store's sentinel
// errors and fn's own errors already say what they are.
func (s *Store) wrap(err error) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %w", store.ErrClosed)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fmt.Errorf("pgstore: %w", err)
	}
	return err
}

// read runs fn on the pool, for methods that only read.
func (s *Store) read(ctx context.Context, fn func(q querier) error) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.wrap(fn(s.pool))
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func enc(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("pgstore: encoding %T: %v", v, err)) // plain structs always encode
	}
	return b
}

func dec[T any](b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("pgstore: decoding %T: %w", v, err)
	}
	return v, nil
}

// getRec loads one record by sql; pgx.ErrNoRows becomes ErrNotFound
// naming what.
func getRec[T any](ctx context.Context, q querier, what, sql string, args ...any) (T, error) {
	var b []byte
	if err := q.QueryRow(ctx, sql, args...).Scan(&b); err != nil {
		var zero T
		if errors.Is(err, pgx.ErrNoRows) {
			return zero, fmt.Errorf("pgstore: %s: %w", what, store.ErrNotFound)
		}
		return zero, err
	}
	return dec[T](b)
}

// listRecs loads every record sql selects (one bytea column).
func listRecs[T any](ctx context.Context, q querier, sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	bs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, err
	}
	var out []T
	for _, b := range bs {
		v, err := dec[T](b)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Round(0)
}

// nanos is t as Unix nanoseconds for ordering columns, clamped to what an
// int64 holds (the zero time sorts first).
func nanos(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

func normJob(j store.Job) store.Job {
	j.Created, j.Updated = utc(j.Created), utc(j.Updated)
	return j
}

// CreateJob implements [store.Store.CreateJob].
func (s *Store) CreateJob(ctx context.Context, j store.Job) error {
	if j.ID == "" {
		return fmt.Errorf("pgstore: job without ID: %w", store.ErrInvalid)
	}
	j = normJob(j)
	return s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "INSERT INTO vk_jobs (id, settled, rec) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING", j.ID, j.Settled, enc(j))
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("pgstore: job %s exists: %w", j.ID, store.ErrConflict)
		}
		return err
	})
}

// GetJob implements [store.Store.GetJob].
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	var j store.Job
	err := s.read(ctx, func(q querier) (err error) {
		j, err = getRec[store.Job](ctx, q, "job "+id, "SELECT rec FROM vk_jobs WHERE id = $1", id)
		return err
	})
	return j, err
}

// UpdateJob implements [store.Store.UpdateJob]. The row is locked, so fn
// runs once.
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(*store.Job) error) (store.Job, error) {
	var out store.Job
	err := s.write(ctx, func(tx pgx.Tx) error {
		j, err := getRec[store.Job](ctx, tx, "job "+id, "SELECT rec FROM vk_jobs WHERE id = $1 FOR UPDATE", id)
		if err != nil {
			return err
		}
		if err := fn(&j); err != nil {
			return err
		}
		if j.ID != id {
			return fmt.Errorf("pgstore: update changed job ID %s to %s: %w", id, j.ID, store.ErrInvalid)
		}
		j = normJob(j)
		rec := enc(j)
		if _, err := tx.Exec(ctx, "UPDATE vk_jobs SET settled = $2, rec = $3 WHERE id = $1", id, j.Settled, rec); err != nil {
			return err
		}
		out, err = dec[store.Job](rec) // the caller's own copy
		return err
	})
	if err != nil {
		return store.Job{}, err
	}
	return out, nil
}

// ListJobs implements [store.Store.ListJobs].
func (s *Store) ListJobs(ctx context.Context, unsettledOnly bool) ([]store.Job, error) {
	var out []store.Job
	err := s.read(ctx, func(q querier) (err error) {
		out, err = listRecs[store.Job](ctx, q, "SELECT rec FROM vk_jobs WHERE NOT (settled AND $1) ORDER BY id COLLATE \"C\"", unsettledOnly)
		return err
	})
	return out, err
}

// DeleteJob implements [store.Store.DeleteJob].
func (s *Store) DeleteJob(ctx context.Context, id string) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "DELETE FROM vk_jobs WHERE id = $1", id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("pgstore: job %s: %w", id, store.ErrNotFound)
		}
		_, err = tx.Exec(ctx, "UPDATE vk_answers SET dropped = true WHERE job = $1 AND job <> ''", id)
		return err
	})
}

// PutAdmission implements [store.Store.PutAdmission].
func (s *Store) PutAdmission(ctx context.Context, a store.Admission) error {
	if a.ID == "" {
		return fmt.Errorf("pgstore: admission without ID: %w", store.ErrInvalid)
	}
	a.ClaimedAt = utc(a.ClaimedAt)
	return s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO vk_admissions (id, rec) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET rec = excluded.rec", a.ID, enc(a))
		return err
	})
}

// GetAdmission implements [store.Store.GetAdmission].
func (s *Store) GetAdmission(ctx context.Context, id string) (store.Admission, error) {
	var a store.Admission
	err := s.read(ctx, func(q querier) (err error) {
		a, err = getRec[store.Admission](ctx, q, "admission "+id, "SELECT rec FROM vk_admissions WHERE id = $1", id)
		return err
	})
	return a, err
}

// ListAdmissions implements [store.Store.ListAdmissions].
func (s *Store) ListAdmissions(ctx context.Context) ([]store.Admission, error) {
	var out []store.Admission
	err := s.read(ctx, func(q querier) (err error) {
		out, err = listRecs[store.Admission](ctx, q, "SELECT rec FROM vk_admissions ORDER BY id COLLATE \"C\"")
		return err
	})
	return out, err
}

// DeleteAdmission implements [store.Store.DeleteAdmission].
func (s *Store) DeleteAdmission(ctx context.Context, id string) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "DELETE FROM vk_admissions WHERE id = $1", id)
		return err
	})
}

// answerRow loads an answer with its dropped flag folded in.
func answerRow(ctx context.Context, q querier, sql, principal, requestID string) (store.Answer, error) {
	var (
		b       []byte
		dropped bool
	)
	if err := q.QueryRow(ctx, sql, principal, requestID).Scan(&b, &dropped); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Answer{}, fmt.Errorf("pgstore: answer %s/%s: %w", principal, requestID, store.ErrNotFound)
		}
		return store.Answer{}, err
	}
	a, err := dec[store.Answer](b)
	a.Dropped = a.Dropped || dropped
	return a, err
}

// PutAnswer implements [store.Store.PutAnswer].
func (s *Store) PutAnswer(ctx context.Context, a store.Answer) error {
	if a.Principal == "" || a.RequestID == "" || a.Created.IsZero() {
		return fmt.Errorf("pgstore: answer without principal, request_id or time: %w", store.ErrInvalid)
	}
	a.Created = utc(a.Created)
	rec := enc(a)
	return s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO vk_answers (principal, request_id, job, created, dropped, rec)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (principal, request_id) DO NOTHING`,
			a.Principal, a.RequestID, a.Job, nanos(a.Created), a.Dropped, rec)
		if err != nil || tag.RowsAffected() == 1 {
			return err
		}
		old, err := answerRow(ctx, tx, "SELECT rec, dropped FROM vk_answers WHERE principal = $1 AND request_id = $2 FOR UPDATE", a.Principal, a.RequestID)
		if err != nil {
			return err
		}
		if !old.Expired(a.Created) {
			return fmt.Errorf("pgstore: answer %s/%s exists: %w", a.Principal, a.RequestID, store.ErrConflict)
		}
		_, err = tx.Exec(ctx, `UPDATE vk_answers SET job = $3, created = $4, dropped = $5, rec = $6
			WHERE principal = $1 AND request_id = $2`, a.Principal, a.RequestID, a.Job, nanos(a.Created), a.Dropped, rec)
		return err
	})
}

// GetAnswer implements [store.Store.GetAnswer].
func (s *Store) GetAnswer(ctx context.Context, principal, requestID string, now store.Time) (store.Answer, error) {
	var a store.Answer
	err := s.read(ctx, func(q querier) (err error) {
		a, err = answerRow(ctx, q, "SELECT rec, dropped FROM vk_answers WHERE principal = $1 AND request_id = $2", principal, requestID)
		if err == nil && a.Expired(now) {
			err = fmt.Errorf("pgstore: answer %s/%s: %w", principal, requestID, store.ErrExpired)
		}
		return err
	})
	return a, err
}

// PruneAnswers implements [store.Store.PruneAnswers].
func (s *Store) PruneAnswers(ctx context.Context, before store.Time) (int, error) {
	var n int
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "DELETE FROM vk_answers WHERE created < $1", nanos(before))
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}

// PutApproval implements [store.Store.PutApproval].
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

// CreateApproval implements [store.Store.CreateApproval].
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

// GetApproval implements [store.Store.GetApproval].
func (s *Store) GetApproval(ctx context.Context, instance string, project int64) (store.Approval, error) {
	var a store.Approval
	err := s.read(ctx, func(q querier) (err error) {
		a, err = getRec[store.Approval](ctx, q, fmt.Sprintf("approval %s/%d", instance, project),
			"SELECT rec FROM vk_approvals WHERE instance = $1 AND project = $2", instance, project)
		return err
	})
	return a, err
}

// ListApprovals implements [store.Store.ListApprovals].
func (s *Store) ListApprovals(ctx context.Context) ([]store.Approval, error) {
	var out []store.Approval
	err := s.read(ctx, func(q querier) (err error) {
		out, err = listRecs[store.Approval](ctx, q, "SELECT rec FROM vk_approvals ORDER BY instance COLLATE \"C\", project")
		return err
	})
	return out, err
}

// CreatePrincipal implements [store.Store.CreatePrincipal].
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

// GetPrincipal implements [store.Store.GetPrincipal].
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	var p store.Principal
	err := s.read(ctx, func(q querier) (err error) {
		p, err = getRec[store.Principal](ctx, q, "principal "+id, "SELECT rec FROM vk_principals WHERE id = $1", id)
		return err
	})
	return p, err
}

// ListPrincipals implements [store.Store.ListPrincipals].
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	var out []store.Principal
	err := s.read(ctx, func(q querier) (err error) {
		out, err = listRecs[store.Principal](ctx, q, "SELECT rec FROM vk_principals ORDER BY id COLLATE \"C\"")
		return err
	})
	return out, err
}

// RemovePrincipal implements [store.Store.RemovePrincipal].
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

// CreateToken implements [store.Store.CreateToken].
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

// UseToken implements [store.Store.UseToken].
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

// ListTokens implements [store.Store.ListTokens].
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	var out []store.Token
	err := s.read(ctx, func(q querier) (err error) {
		out, err = listRecs[store.Token](ctx, q, "SELECT rec FROM vk_tokens ORDER BY created, hash")
		return err
	})
	return out, err
}

// AppendAudit implements [store.Store.AppendAudit].
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

// ListAudit implements [store.Store.ListAudit].
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

// GetMeta implements [store.Store.GetMeta].
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

// PutMeta implements [store.Store.PutMeta].
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

// InitMeta implements [store.Store.InitMeta].
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

// Close implements [store.Store.Close]: it closes the pool (waiting for
// calls in flight). Closing twice is not an error.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		s.pool.Close()
	})
	return nil
}
