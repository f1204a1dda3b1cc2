package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/vk-ci/vk/hub/output"
)

// Output is an [output.Store] in the store's database: per job a row with
// its length and completeness, and the bytes as append-only chunks keyed
// by their start offset, each written in the same transaction as the new
// length, so a committed Append is durable before the hub acks it. Writes
// are fenced like the store's. Drop deletes the job's rows (settle).
//
// Wait is woken by this instance's own Append, MarkComplete and Drop
// only: it is for a hub that is the output's only writer, as the leader
// is (a standby does not serve output reads, docs/ha.md).
type Output struct {
	s *Store

	mu      sync.Mutex
	waiters map[string]chan struct{} // guarded by mu: closed on a change
	closed  bool                     // guarded by mu
	done    chan struct{}
}

var _ output.Store = (*Output)(nil)

// Output returns the job output store on s's database.
func (s *Store) Output() *Output {
	return &Output{s: s, waiters: map[string]chan struct{}{}, done: make(chan struct{})}
}

func (o *Output) check(ctx context.Context, job string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	o.mu.Lock()
	closed := o.closed
	o.mu.Unlock()
	if closed || o.s.closed.Load() {
		return output.ErrClosed
	}
	if !output.ValidJob(job) {
		return fmt.Errorf("%w: %q", output.ErrBadJob, job)
	}
	return nil
}

// notify wakes the job's waiters.
func (o *Output) notify(job string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ch, ok := o.waiters[job]; ok {
		close(ch)
		delete(o.waiters, job)
	}
}

func (o *Output) write(ctx context.Context, job string, fn func(tx pgx.Tx) error) error {
	if err := o.check(ctx, job); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, o.s.pool, func(tx pgx.Tx) error {
		if err := o.s.fence(ctx, tx); err != nil {
			return err
		}
		return fn(tx)
	})
	if err != nil && o.s.closed.Load() {
		return output.ErrClosed
	}
	return err
}

// Append implements [output.Store.Append].
func (o *Output) Append(ctx context.Context, job string, offset int64, data []byte) (int64, error) {
	if offset < 0 {
		return 0, fmt.Errorf("output: negative offset %d: %w", offset, output.ErrGap)
	}
	var (
		length int64
		grew   bool
	)
	err := o.write(ctx, job, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO vk_output (job) VALUES ($1) ON CONFLICT (job) DO NOTHING", job); err != nil {
			return err
		}
		var complete bool
		if err := tx.QueryRow(ctx, "SELECT length, complete FROM vk_output WHERE job = $1 FOR UPDATE", job).Scan(&length, &complete); err != nil {
			return err
		}
		switch {
		case offset > length:
			return fmt.Errorf("%w: job %s chunk at %d, output ends at %d", output.ErrGap, job, offset, length)
		case offset+int64(len(data)) <= length:
			return nil // all of it is there already
		case complete:
			return fmt.Errorf("%w: job %s", output.ErrComplete, job)
		}
		tail := data[length-offset:]
		if _, err := tx.Exec(ctx, "INSERT INTO vk_output_chunks (job, off, data) VALUES ($1, $2, $3)", job, length, tail); err != nil {
			return err
		}
		length += int64(len(tail))
		grew = true
		_, err := tx.Exec(ctx, "UPDATE vk_output SET length = $2 WHERE job = $1", job, length)
		return err
	})
	if err != nil {
		return length, err
	}
	if grew {
		o.notify(job)
	}
	return length, nil
}

// state reads a job's length and completeness; a job without a row has
// no output yet.
func state(ctx context.Context, q querier, job string) (int64, bool, error) {
	var (
		length   int64
		complete bool
	)
	err := q.QueryRow(ctx, "SELECT length, complete FROM vk_output WHERE job = $1", job).Scan(&length, &complete)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return length, complete, err
}

// ReadAt implements [output.Store.ReadAt]. Length and bytes come from one
// snapshot.
func (o *Output) ReadAt(ctx context.Context, job string, offset int64, max int) (output.Chunk, error) {
	if max <= 0 || max > output.MaxRead {
		max = output.MaxRead
	}
	if err := o.check(ctx, job); err != nil {
		return output.Chunk{}, err
	}
	c := output.Chunk{Offset: offset}
	err := pgx.BeginTxFunc(ctx, o.s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		length, complete, err := state(ctx, tx, job)
		if err != nil {
			return err
		}
		c.Length = length
		if offset < 0 || offset > length {
			return fmt.Errorf("%w: job %s offset %d, length %d", output.ErrOffset, job, offset, length)
		}
		n := min(int64(max), length-offset)
		c.Complete = complete && offset+n == length
		if n == 0 {
			return nil
		}
		end := offset + n
		rows, err := tx.Query(ctx, `SELECT off, data FROM vk_output_chunks
			WHERE job = $1 AND off < $3 AND off + length(data) > $2 ORDER BY off`, job, offset, end)
		if err != nil {
			return err
		}
		buf := make([]byte, 0, n)
		var (
			off  int64
			data []byte
		)
		_, err = pgx.ForEachRow(rows, []any{&off, &data}, func() error {
			lo, hi := max64(offset, off)-off, min(end, off+int64(len(data)))-off
			buf = append(buf, data[lo:hi]...)
			return nil
		})
		if err != nil {
			return err
		}
		if int64(len(buf)) != n {
			return fmt.Errorf("pgstore: output of job %s: %d bytes in chunks at [%d,%d), want %d", job, len(buf), offset, end, n)
		}
		c.Data = buf
		return nil
	})
	if err != nil && o.s.closed.Load() {
		return output.Chunk{}, output.ErrClosed
	}
	return c, err
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// MarkComplete implements [output.Store.MarkComplete].
func (o *Output) MarkComplete(ctx context.Context, job string) error {
	err := o.write(ctx, job, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO vk_output (job, complete) VALUES ($1, true)
			ON CONFLICT (job) DO UPDATE SET complete = true`, job)
		return err
	})
	if err == nil {
		o.notify(job)
	}
	return err
}

// Len implements [output.Store.Len].
func (o *Output) Len(ctx context.Context, job string) (int64, bool, error) {
	if err := o.check(ctx, job); err != nil {
		return 0, false, err
	}
	return state(ctx, o.s.pool, job)
}

// Wait implements [output.Store.Wait].
func (o *Output) Wait(ctx context.Context, job string, offset int64) error {
	if err := o.check(ctx, job); err != nil {
		return err
	}
	// Register before reading, so a change between the read and the wait
	// is not missed.
	o.mu.Lock()
	ch, ok := o.waiters[job]
	if !ok {
		ch = make(chan struct{})
		o.waiters[job] = ch
	}
	o.mu.Unlock()
	length, complete, err := state(ctx, o.s.pool, job)
	if err != nil {
		return err
	}
	if length > offset || complete {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("output: %w", ctx.Err())
	case <-o.done:
		return output.ErrClosed
	}
}

// Drop implements [output.Store.Drop].
func (o *Output) Drop(ctx context.Context, job string) error {
	err := o.write(ctx, job, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "DELETE FROM vk_output WHERE job = $1", job) // chunks cascade
		return err
	})
	if err == nil {
		o.notify(job)
	}
	return err
}

// Close implements [output.Store.Close]: it wakes every Wait with
// ErrClosed and refuses further calls; the database pool is the store's
// and stays open.
func (o *Output) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.closed = true
		close(o.done)
	}
	return nil
}
