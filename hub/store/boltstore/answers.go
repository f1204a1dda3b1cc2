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
