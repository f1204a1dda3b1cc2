// Package memstore is an in-memory [store.Store] for tests and the
// simulator (location "mem:"). Nothing survives the process; otherwise it
// behaves exactly like boltstore (both pass hub/store/storetest). It copies
// every byte slice in and out, so callers never share memory with it.
//
// Every method has the same plumbing: refuse a done context or a closed
// store, hold mu for the whole operation (which makes each method atomic),
// and copy records in and out. That plumbing lives once, in [locked],
// [Store.lockedDo], [lookup], [insert] and [sortedValues]; the methods keep
// only what is their own (validation, normalisation, the record's rules).
package memstore

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/vk-ci/vk/hub/store"
)

func init() {
	store.Register("mem:", func(context.Context, string) (store.Store, error) { return New(), nil })
}

// Store is an in-memory store.Store. Its zero value is not usable; call
// [New]. Safe for concurrent use.
type Store struct {
	mu         sync.Mutex
	closed     bool                           // guarded by mu
	jobs       map[string]store.Job           // guarded by mu
	admissions map[string]store.Admission     // guarded by mu
	answers    map[answerKey]store.Answer     // guarded by mu
	approvals  map[approvalKey]store.Approval // guarded by mu
	principals map[string]store.Principal     // guarded by mu
	tokens     map[store.Hash]store.Token     // guarded by mu
	audit      []store.AuditEntry             // guarded by mu
	meta       map[string][]byte              // guarded by mu
}

type answerKey struct{ principal, requestID string }
type approvalKey struct {
	instance string
	project  int64
}

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	return &Store{
		jobs:       map[string]store.Job{},
		admissions: map[string]store.Admission{},
		answers:    map[answerKey]store.Answer{},
		approvals:  map[approvalKey]store.Approval{},
		principals: map[string]store.Principal{},
		tokens:     map[store.Hash]store.Token{},
		meta:       map[string][]byte{},
	}
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Round(0)
}

func normJob(j store.Job) store.Job {
	j = j.Clone()
	j.Created, j.Updated = utc(j.Created), utc(j.Updated)
	return j
}

// lock takes mu and fails if ctx is done or the store is closed; on nil
// error the caller must unlock.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("memstore: %w", store.ErrClosed)
	}
	return nil
}

// locked runs fn with mu held and returns what it returns; if ctx is done
// or the store closed it returns T's zero value and that error without
// calling fn.
func locked[T any](ctx context.Context, s *Store, fn func() (T, error)) (T, error) {
	if err := s.lock(ctx); err != nil {
		var zero T
		return zero, err
	}
	defer s.mu.Unlock()
	return fn()
}

// lockedDo is [locked] for methods that return only an error.
func (s *Store) lockedDo(ctx context.Context, fn func() error) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	return fn()
}

// lookup returns a copy (made by cp; nil: the value as is, for records
// without slices) of m[k]. A missing key is V's zero value and an error
// "memstore: <what()>: " wrapping [store.ErrNotFound]; what names the
// record and is called only on a miss, so a hit formats nothing and
// allocates nothing beyond cp's copy. The caller holds mu.
func lookup[K comparable, V any](m map[K]V, k K, cp func(V) V, what func() string) (V, error) {
	v, ok := m[k]
	if !ok {
		return v, fmt.Errorf("memstore: %s: %w", what(), store.ErrNotFound)
	}
	if cp != nil {
		v = cp(v)
	}
	return v, nil
}

// insert stores v under k unless k is taken, when it stores nothing and
// returns an error "memstore: <what()> exists: " wrapping
// [store.ErrConflict] (what is called only then). The caller holds mu and
// has normalised v already.
func insert[K comparable, V any](m map[K]V, k K, v V, what func() string) error {
	if _, ok := m[k]; ok {
		return fmt.Errorf("memstore: %s exists: %w", what(), store.ErrConflict)
	}
	m[k] = v
	return nil
}

// sortedValues returns copies (made by cp; nil: as is) of the values of m
// that keep accepts (nil: all), ordered by key; nil when there are none.
// The caller holds mu.
func sortedValues[K cmp.Ordered, V any](m map[K]V, keep func(V) bool, cp func(V) V) []V {
	var out []V
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if keep != nil && !keep(v) {
			continue
		}
		if cp != nil {
			v = cp(v)
		}
		out = append(out, v)
	}
	return out
}

// CreateJob implements [store.Records.CreateJob].
func (s *Store) CreateJob(ctx context.Context, j store.Job) error {
	if j.ID == "" {
		return fmt.Errorf("memstore: job without ID: %w", store.ErrInvalid)
	}
	return s.lockedDo(ctx, func() error { return insert(s.jobs, j.ID, normJob(j), func() string { return "job " + j.ID }) })
}

// GetJob implements [store.Records.GetJob].
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	return locked(ctx, s, func() (store.Job, error) {
		return lookup(s.jobs, id, store.Job.Clone, func() string { return "job " + id })
	})
}

// UpdateJob implements [store.Records.UpdateJob].
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(*store.Job) error) (store.Job, error) {
	return locked(ctx, s, func() (store.Job, error) {
		j, err := lookup(s.jobs, id, store.Job.Clone, func() string { return "job " + id })
		if err != nil {
			return store.Job{}, err
		}
		if err := fn(&j); err != nil {
			return store.Job{}, err
		}
		if j.ID != id {
			return store.Job{}, fmt.Errorf("memstore: update changed job ID %s to %s: %w", id, j.ID, store.ErrInvalid)
		}
		s.jobs[id] = normJob(j)
		return s.jobs[id].Clone(), nil
	})
}

// SaveJob implements [store.Records.SaveJob].
func (s *Store) SaveJob(ctx context.Context, j store.Job) error {
	if j.ID == "" {
		return fmt.Errorf("memstore: job without ID: %w", store.ErrInvalid)
	}
	_, err := locked(ctx, s, func() (struct{}, error) {
		if _, ok := s.jobs[j.ID]; !ok {
			return struct{}{}, fmt.Errorf("memstore: job %s: %w", j.ID, store.ErrNotFound)
		}
		s.jobs[j.ID] = normJob(j)
		return struct{}{}, nil
	})
	return err
}

// ListJobs implements [store.Records.ListJobs].
func (s *Store) ListJobs(ctx context.Context, unsettledOnly bool) ([]store.Job, error) {
	return locked(ctx, s, func() ([]store.Job, error) {
		keep := func(j store.Job) bool { return !unsettledOnly || !j.Settled }
		return sortedValues(s.jobs, keep, store.Job.Clone), nil
	})
}

// DeleteJob implements [store.Records.DeleteJob].
func (s *Store) DeleteJob(ctx context.Context, id string) error {
	return s.lockedDo(ctx, func() error {
		if _, err := lookup(s.jobs, id, nil, func() string { return "job " + id }); err != nil {
			return err
		}
		delete(s.jobs, id)
		for k, a := range s.answers {
			if a.Job == id {
				a.Dropped = true
				s.answers[k] = a
			}
		}
		return nil
	})
}

// PutAdmission implements [store.Records.PutAdmission].
func (s *Store) PutAdmission(ctx context.Context, a store.Admission) error {
	if a.ID == "" {
		return fmt.Errorf("memstore: admission without ID: %w", store.ErrInvalid)
	}
	a.ClaimedAt = utc(a.ClaimedAt)
	return s.lockedDo(ctx, func() error {
		s.admissions[a.ID] = a
		return nil
	})
}

// GetAdmission implements [store.Records.GetAdmission].
func (s *Store) GetAdmission(ctx context.Context, id string) (store.Admission, error) {
	return locked(ctx, s, func() (store.Admission, error) {
		return lookup(s.admissions, id, nil, func() string { return "admission " + id })
	})
}

// ListAdmissions implements [store.Records.ListAdmissions].
func (s *Store) ListAdmissions(ctx context.Context) ([]store.Admission, error) {
	return locked(ctx, s, func() ([]store.Admission, error) { return sortedValues(s.admissions, nil, nil), nil })
}

// DeleteAdmission implements [store.Records.DeleteAdmission].
func (s *Store) DeleteAdmission(ctx context.Context, id string) error {
	return s.lockedDo(ctx, func() error {
		delete(s.admissions, id)
		return nil
	})
}

// PutAnswer implements [store.Answers.PutAnswer]. Unlike the create methods
// it replaces an expired answer, so it does not use insert.
func (s *Store) PutAnswer(ctx context.Context, a store.Answer) error {
	if err := checkAnswer(a); err != nil {
		return err
	}
	return s.lockedDo(ctx, func() error {
		if err := s.answerFree(a); err != nil {
			return err
		}
		s.putAnswer(a)
		return nil
	})
}

// CreateJobAnswered implements [store.Store.CreateJobAnswered]: both
// checked, then both stored, under one hold of the lock.
func (s *Store) CreateJobAnswered(ctx context.Context, j store.Job, a store.Answer) error {
	if j.ID == "" {
		return fmt.Errorf("memstore: job without ID: %w", store.ErrInvalid)
	}
	if err := checkAnswer(a); err != nil {
		return err
	}
	if a.Job != j.ID {
		return fmt.Errorf("memstore: answer names job %q, not the job %s it answers: %w", a.Job, j.ID, store.ErrInvalid)
	}
	return s.lockedDo(ctx, func() error {
		if err := s.answerFree(a); err != nil {
			return err
		}
		if err := insert(s.jobs, j.ID, normJob(j), func() string { return "job " + j.ID }); err != nil {
			return err
		}
		s.putAnswer(a)
		return nil
	})
}

func checkAnswer(a store.Answer) error {
	if a.Principal == "" || a.RequestID == "" || a.Created.IsZero() {
		return fmt.Errorf("memstore: answer without principal, request_id or time: %w", store.ErrInvalid)
	}
	return nil
}

// answerFree fails with ErrConflict if a live answer holds a's key. The
// caller holds mu.
func (s *Store) answerFree(a store.Answer) error {
	if old, ok := s.answers[answerKey{a.Principal, a.RequestID}]; ok && !old.Expired(a.Created) {
		return fmt.Errorf("memstore: answer %s/%s exists: %w", a.Principal, a.RequestID, store.ErrConflict)
	}
	return nil
}

// putAnswer stores a copy of a. The caller holds mu.
func (s *Store) putAnswer(a store.Answer) {
	a = a.Clone()
	a.Created = utc(a.Created)
	s.answers[answerKey{a.Principal, a.RequestID}] = a
}

// GetAnswer implements [store.Answers.GetAnswer].
func (s *Store) GetAnswer(ctx context.Context, principal, requestID string, now time.Time) (store.Answer, error) {
	return locked(ctx, s, func() (store.Answer, error) {
		a, err := lookup(s.answers, answerKey{principal, requestID}, store.Answer.Clone, func() string { return "answer " + principal + "/" + requestID })
		if err == nil && a.Expired(now) {
			err = fmt.Errorf("memstore: answer %s/%s: %w", principal, requestID, store.ErrExpired)
		}
		return a, err
	})
}

// PruneAnswers implements [store.Answers.PruneAnswers].
func (s *Store) PruneAnswers(ctx context.Context, before time.Time) (int, error) {
	return locked(ctx, s, func() (int, error) {
		n := 0
		for k, a := range s.answers {
			if a.Created.Before(before) {
				delete(s.answers, k)
				n++
			}
		}
		return n, nil
	})
}

// PutApproval implements [store.Approvals.PutApproval].
func (s *Store) PutApproval(ctx context.Context, a store.Approval) error {
	if a.Instance == "" {
		return fmt.Errorf("memstore: approval without instance: %w", store.ErrInvalid)
	}
	a.Updated = utc(a.Updated)
	return s.lockedDo(ctx, func() error {
		s.approvals[approvalKey{a.Instance, a.Project}] = a
		return nil
	})
}

// approvalCreate is CreateApproval's result under one type for [locked].
type approvalCreate struct {
	cur     store.Approval
	created bool
}

// CreateApproval implements [store.Approvals.CreateApproval]. A taken key is
// not an error here (it answers the approval already there), so it does
// not use insert.
func (s *Store) CreateApproval(ctx context.Context, a store.Approval) (store.Approval, bool, error) {
	if a.Instance == "" {
		return store.Approval{}, false, fmt.Errorf("memstore: approval without instance: %w", store.ErrInvalid)
	}
	a.Updated = utc(a.Updated)
	r, err := locked(ctx, s, func() (approvalCreate, error) {
		k := approvalKey{a.Instance, a.Project}
		if cur, ok := s.approvals[k]; ok {
			if cur.Path == "" && a.Path != "" {
				cur.Path = a.Path // decided ahead of the first sighting: learn the path
				s.approvals[k] = cur
			}
			return approvalCreate{cur, false}, nil
		}
		s.approvals[k] = a
		return approvalCreate{a, true}, nil
	})
	return r.cur, r.created, err
}

// GetApproval implements [store.Approvals.GetApproval].
func (s *Store) GetApproval(ctx context.Context, instance string, project int64) (store.Approval, error) {
	return locked(ctx, s, func() (store.Approval, error) {
		return lookup(s.approvals, approvalKey{instance, project}, nil, func() string { return fmt.Sprintf("approval %s/%d", instance, project) })
	})
}

// ListApprovals implements [store.Approvals.ListApprovals].
func (s *Store) ListApprovals(ctx context.Context) ([]store.Approval, error) {
	return locked(ctx, s, func() ([]store.Approval, error) {
		out := slices.Collect(maps.Values(s.approvals))
		slices.SortFunc(out, func(a, b store.Approval) int {
			return cmp.Or(cmp.Compare(a.Instance, b.Instance), cmp.Compare(a.Project, b.Project))
		})
		return out, nil
	})
}

// CreatePrincipal implements [store.Principals.CreatePrincipal].
func (s *Store) CreatePrincipal(ctx context.Context, p store.Principal) error {
	if p.ID == "" {
		return fmt.Errorf("memstore: principal without ID: %w", store.ErrInvalid)
	}
	p = p.Clone()
	p.Created, p.RemovedAt = utc(p.Created), utc(p.RemovedAt)
	return s.lockedDo(ctx, func() error { return insert(s.principals, p.ID, p, func() string { return "principal " + p.ID }) })
}

// GetPrincipal implements [store.Principals.GetPrincipal].
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	return locked(ctx, s, func() (store.Principal, error) {
		return lookup(s.principals, id, store.Principal.Clone, func() string { return "principal " + id })
	})
}

// ListPrincipals implements [store.Principals.ListPrincipals].
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	return locked(ctx, s, func() ([]store.Principal, error) {
		return sortedValues(s.principals, nil, store.Principal.Clone), nil
	})
}

// RemovePrincipal implements [store.Principals.RemovePrincipal].
func (s *Store) RemovePrincipal(ctx context.Context, id string, at time.Time) error {
	return s.lockedDo(ctx, func() error {
		p, err := lookup(s.principals, id, nil, func() string { return "principal " + id })
		if err != nil {
			return err
		}
		if !p.Removed {
			p.Removed, p.RemovedAt = true, utc(at)
			s.principals[id] = p
		}
		return nil
	})
}

// CreateToken implements [store.Principals.CreateToken].
func (s *Store) CreateToken(ctx context.Context, tok store.Token) error {
	if tok.Hash == (store.Hash{}) {
		return fmt.Errorf("memstore: token without hash: %w", store.ErrInvalid)
	}
	tok.Created, tok.Expires, tok.UsedAt = utc(tok.Created), utc(tok.Expires), utc(tok.UsedAt)
	// The hash is a secret's digest: the error does not name it.
	return s.lockedDo(ctx, func() error { return insert(s.tokens, tok.Hash, tok, func() string { return "token" }) })
}

// UseToken implements [store.Principals.UseToken].
func (s *Store) UseToken(ctx context.Context, h store.Hash, kind store.PrincipalKind, usedBy string, now time.Time) (store.Token, error) {
	return locked(ctx, s, func() (store.Token, error) {
		tok, ok := s.tokens[h]
		switch {
		case !ok || tok.Kind != kind:
			return store.Token{}, fmt.Errorf("memstore: token: %w", store.ErrNotFound)
		case tok.Used:
			return store.Token{}, fmt.Errorf("memstore: token already used: %w", store.ErrConflict)
		case !now.Before(tok.Expires):
			return store.Token{}, fmt.Errorf("memstore: token expired at %s: %w", tok.Expires, store.ErrExpired)
		}
		tok.Used, tok.UsedBy, tok.UsedAt = true, usedBy, utc(now)
		s.tokens[h] = tok
		return tok, nil
	})
}

// ListTokens implements [store.Principals.ListTokens].
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	return locked(ctx, s, func() ([]store.Token, error) {
		out := slices.Collect(maps.Values(s.tokens))
		slices.SortFunc(out, func(a, b store.Token) int {
			return cmp.Or(a.Created.Compare(b.Created), slices.Compare(a.Hash[:], b.Hash[:]))
		})
		return out, nil
	})
}

// AppendAudit implements [store.Audit.AppendAudit].
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	e.Time = utc(e.Time)
	return locked(ctx, s, func() (store.AuditEntry, error) {
		e.Seq = uint64(len(s.audit)) + 1
		s.audit = append(s.audit, e)
		return e, nil
	})
}

// ListAudit implements [store.Audit.ListAudit].
func (s *Store) ListAudit(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	return locked(ctx, s, func() ([]store.AuditEntry, error) {
		var out []store.AuditEntry
		for i := len(s.audit) - 1; i >= 0 && (limit <= 0 || len(out) < limit); i-- {
			out = append(out, s.audit[i])
		}
		return out, nil
	})
}

// GetMeta implements [store.Meta.GetMeta].
func (s *Store) GetMeta(ctx context.Context, key string) ([]byte, error) {
	return locked(ctx, s, func() ([]byte, error) {
		return lookup(s.meta, key, slices.Clone, func() string { return fmt.Sprintf("meta %q", key) })
	})
}

// PutMeta implements [store.Meta.PutMeta].
func (s *Store) PutMeta(ctx context.Context, key string, value []byte) error {
	if key == "" {
		return fmt.Errorf("memstore: empty meta key: %w", store.ErrInvalid)
	}
	value = append([]byte{}, value...)
	return s.lockedDo(ctx, func() error {
		s.meta[key] = value
		return nil
	})
}

// InitMeta implements [store.Meta.InitMeta].
func (s *Store) InitMeta(ctx context.Context, key string, value []byte) ([]byte, error) {
	if key == "" {
		return nil, fmt.Errorf("memstore: empty meta key: %w", store.ErrInvalid)
	}
	return locked(ctx, s, func() ([]byte, error) {
		v, ok := s.meta[key]
		if !ok {
			v = append([]byte{}, value...)
			s.meta[key] = v
		}
		return slices.Clone(v), nil
	})
}

// Close implements [store.Store.Close]. Closing twice is not an error.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
