package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/vk-ci/vk/hub/store"
)

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

// PutAnswer implements [store.Answers.PutAnswer].
func (s *Store) PutAnswer(ctx context.Context, a store.Answer) error {
	if err := checkAnswer(a); err != nil {
		return err
	}
	a.Created = utc(a.Created)
	return s.write(ctx, func(tx pgx.Tx) error { return putAnswer(ctx, tx, a) })
}

// CreateJobAnswered implements [store.Store.CreateJobAnswered]: the job's
// row and its answer's in one transaction, fenced as every write is (a
// deposed leader stores neither).
func (s *Store) CreateJobAnswered(ctx context.Context, j store.Job, a store.Answer) error {
	if j.ID == "" {
		return fmt.Errorf("pgstore: job without ID: %w", store.ErrInvalid)
	}
	if err := checkAnswer(a); err != nil {
		return err
	}
	if a.Job != j.ID {
		return fmt.Errorf("pgstore: answer names job %q, not the job %s it answers: %w", a.Job, j.ID, store.ErrInvalid)
	}
	j = normJob(j)
	a.Created = utc(a.Created)
	return s.write(ctx, func(tx pgx.Tx) error {
		if err := insertJob(ctx, tx, j); err != nil {
			return err
		}
		return putAnswer(ctx, tx, a) // its conflict rolls the job back too
	})
}

func checkAnswer(a store.Answer) error {
	if a.Principal == "" || a.RequestID == "" || a.Created.IsZero() {
		return fmt.Errorf("pgstore: answer without principal, request_id or time: %w", store.ErrInvalid)
	}
	return nil
}

// putAnswer stores a in tx unless a live answer holds its key.
func putAnswer(ctx context.Context, tx pgx.Tx, a store.Answer) error {
	rec := enc(a)
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
}

// GetAnswer implements [store.Answers.GetAnswer].
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

// PruneAnswers implements [store.Answers.PruneAnswers].
func (s *Store) PruneAnswers(ctx context.Context, before store.Time) (int, error) {
	var n int
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "DELETE FROM vk_answers WHERE created < $1", nanos(before))
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}
