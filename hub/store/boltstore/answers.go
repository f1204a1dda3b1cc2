package boltstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/vk-ci/vk/hub/store"
	bolt "go.etcd.io/bbolt"
)

// PutAnswer implements [store.Answers.PutAnswer].
func (s *Store) PutAnswer(ctx context.Context, a store.Answer) error {
	if err := checkAnswer(a); err != nil {
		return err
	}
	a.Created = utc(a.Created)
	return s.update(ctx, func(tx *bolt.Tx) error { return putAnswer(tx, a) })
}

// CreateJobAnswered implements [store.Store.CreateJobAnswered]: the job
// and its answer in one transaction, hence one commit and fsync.
func (s *Store) CreateJobAnswered(ctx context.Context, j store.Job, a store.Answer) error {
	if err := checkJob(j); err != nil {
		return err
	}
	if err := checkAnswer(a); err != nil {
		return err
	}
	if a.Job != j.ID {
		return fmt.Errorf("boltstore: answer names job %q, not the job %s it answers: %w", a.Job, j.ID, store.ErrInvalid)
	}
	j.Created, j.Updated = utc(j.Created), utc(j.Updated)
	a.Created = utc(a.Created)
	return s.update(ctx, func(tx *bolt.Tx) error {
		if err := putNew(tx.Bucket(bktJobs), []byte(j.ID), j, func() string { return "job " + j.ID }); err != nil {
			return err
		}
		return putAnswer(tx, a) // its conflict rolls the job back too
	})
}

func checkAnswer(a store.Answer) error {
	if a.Principal == "" || a.RequestID == "" || a.Created.IsZero() || hasNUL(a.Principal, a.RequestID, a.Job) {
		return fmt.Errorf("boltstore: answer without principal, request_id or time: %w", store.ErrInvalid)
	}
	return nil
}

// putAnswer stores a in tx unless a live answer holds its key, keeping
// the index of answers by job.
func putAnswer(tx *bolt.Tx, a store.Answer) error {
	b := tx.Bucket(bktAnswers)
	k := key(a.Principal, a.RequestID)
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
}

// GetAnswer implements [store.Answers.GetAnswer].
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

// PruneAnswers implements [store.Answers.PruneAnswers]. It scans the
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
