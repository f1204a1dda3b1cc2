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
	// closeErr is Close's result, set once inside once.
	closeErr error
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

// Epoch returns the epoch set with [Store.SetEpoch] (0 before).
func (s *Store) Epoch() uint64 { return s.epoch.Load() }

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

// readRec is getRec in a read of s; readRecs is listRecs in one.
func readRec[T any](ctx context.Context, s *Store, what, sql string, args ...any) (out T, err error) {
	err = s.read(ctx, func(q querier) (err error) {
		out, err = getRec[T](ctx, q, what, sql, args...)
		return err
	})
	return out, err
}

func readRecs[T any](ctx context.Context, s *Store, sql string, args ...any) (out []T, err error) {
	err = s.read(ctx, func(q querier) (err error) {
		out, err = listRecs[T](ctx, q, sql, args...)
		return err
	})
	return out, err
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

// Close implements [store.Store.Close]: it closes the pool (waiting for
// calls in flight), for at most [CloseWait]. Past that it returns
// [ErrCloseTimedOut] and leaves the pool closing on its own goroutine:
// pgx says goodbye to the database on each connection and, when the
// database is unreachable, waits up to 15 s per connection for it, one
// connection after another, which held a hub cut off from its database
// in its shutdown for a minute instead of letting its process exit.
// Closing twice is not an error.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.pool.Close()
		}()
		select {
		case <-done:
		case <-time.After(CloseWait):
			s.closeErr = ErrCloseTimedOut
		}
	})
	return s.closeErr
}

// CloseWait bounds how long [Store.Close] waits for the pool to close.
const CloseWait = 3 * time.Second

// ErrCloseTimedOut is [Store.Close]'s error when the pool did not close
// within [CloseWait] (the database unreachable): the connections are
// abandoned, and end with the process.
var ErrCloseTimedOut = errors.New("pgstore: closing the database connections: gave up after " + CloseWait.String() + " (the database does not answer)")
