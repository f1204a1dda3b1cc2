// Package memstore is an in-memory [store.Store] for tests and the
// simulator (location "mem:"). Nothing survives the process; otherwise it
// behaves exactly like boltstore (both pass hub/store/storetest). It copies
// every byte slice in and out, so callers never share memory with it.
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
	closed     bool                       // guarded by mu
	jobs       map[string]store.Job       // guarded by mu
	admissions map[string]store.Admission // guarded by mu
	answers    map[answerKey]store.Answer // guarded by mu
	approvals  map[approvalKey]store.Approval
	principals map[string]store.Principal
	tokens     map[store.Hash]store.Token
	audit      []store.AuditEntry
	meta       map[string][]byte
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

// lock takes mu and fails if the store is closed; on nil error the caller
// must unlock.
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

// CreateJob implements [store.Store.CreateJob].
func (s *Store) CreateJob(ctx context.Context, j store.Job) error {
	if j.ID == "" {
		return fmt.Errorf("memstore: job without ID: %w", store.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := s.jobs[j.ID]; ok {
		return fmt.Errorf("memstore: job %s exists: %w", j.ID, store.ErrConflict)
	}
	s.jobs[j.ID] = normJob(j)
	return nil
}

// GetJob implements [store.Store.GetJob].
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	if err := s.lock(ctx); err != nil {
		return store.Job{}, err
	}
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return store.Job{}, fmt.Errorf("memstore: job %s: %w", id, store.ErrNotFound)
	}
	return j.Clone(), nil
}

// UpdateJob implements [store.Store.UpdateJob].
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(*store.Job) error) (store.Job, error) {
	if err := s.lock(ctx); err != nil {
		return store.Job{}, err
	}
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return store.Job{}, fmt.Errorf("memstore: job %s: %w", id, store.ErrNotFound)
	}
	j = j.Clone()
	if err := fn(&j); err != nil {
		return store.Job{}, err
	}
	if j.ID != id {
		return store.Job{}, fmt.Errorf("memstore: update changed job ID %s to %s: %w", id, j.ID, store.ErrInvalid)
	}
	s.jobs[id] = normJob(j)
	return s.jobs[id].Clone(), nil
}

// ListJobs implements [store.Store.ListJobs].
func (s *Store) ListJobs(ctx context.Context, unsettledOnly bool) ([]store.Job, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []store.Job
	for _, id := range slices.Sorted(maps.Keys(s.jobs)) {
		if j := s.jobs[id]; !unsettledOnly || !j.Settled {
			out = append(out, j.Clone())
		}
	}
	return out, nil
}

// DeleteJob implements [store.Store.DeleteJob].
func (s *Store) DeleteJob(ctx context.Context, id string) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := s.jobs[id]; !ok {
		return fmt.Errorf("memstore: job %s: %w", id, store.ErrNotFound)
	}
	delete(s.jobs, id)
	for k, a := range s.answers {
		if a.Job == id {
			a.Dropped = true
			s.answers[k] = a
		}
	}
	return nil
}

// PutAdmission implements [store.Store.PutAdmission].
func (s *Store) PutAdmission(ctx context.Context, a store.Admission) error {
	if a.ID == "" {
		return fmt.Errorf("memstore: admission without ID: %w", store.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	a.ClaimedAt = utc(a.ClaimedAt)
	s.admissions[a.ID] = a
	return nil
}

// GetAdmission implements [store.Store.GetAdmission].
func (s *Store) GetAdmission(ctx context.Context, id string) (store.Admission, error) {
	if err := s.lock(ctx); err != nil {
		return store.Admission{}, err
	}
	defer s.mu.Unlock()
	a, ok := s.admissions[id]
	if !ok {
		return store.Admission{}, fmt.Errorf("memstore: admission %s: %w", id, store.ErrNotFound)
	}
	return a, nil
}

// ListAdmissions implements [store.Store.ListAdmissions].
func (s *Store) ListAdmissions(ctx context.Context) ([]store.Admission, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []store.Admission
	for _, id := range slices.Sorted(maps.Keys(s.admissions)) {
		out = append(out, s.admissions[id])
	}
	return out, nil
}

// DeleteAdmission implements [store.Store.DeleteAdmission].
func (s *Store) DeleteAdmission(ctx context.Context, id string) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	delete(s.admissions, id)
	return nil
}

// PutAnswer implements [store.Store.PutAnswer].
func (s *Store) PutAnswer(ctx context.Context, a store.Answer) error {
	if a.Principal == "" || a.RequestID == "" || a.Created.IsZero() {
		return fmt.Errorf("memstore: answer without principal, request_id or time: %w", store.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	k := answerKey{a.Principal, a.RequestID}
	if old, ok := s.answers[k]; ok && !old.Expired(a.Created) {
		return fmt.Errorf("memstore: answer %s/%s exists: %w", a.Principal, a.RequestID, store.ErrConflict)
	}
	a = a.Clone()
	a.Created = utc(a.Created)
	s.answers[k] = a
	return nil
}

// GetAnswer implements [store.Store.GetAnswer].
func (s *Store) GetAnswer(ctx context.Context, principal, requestID string, now time.Time) (store.Answer, error) {
	if err := s.lock(ctx); err != nil {
		return store.Answer{}, err
	}
	defer s.mu.Unlock()
	a, ok := s.answers[answerKey{principal, requestID}]
	if !ok {
		return store.Answer{}, fmt.Errorf("memstore: answer %s/%s: %w", principal, requestID, store.ErrNotFound)
	}
	if a.Expired(now) {
		return a.Clone(), fmt.Errorf("memstore: answer %s/%s: %w", principal, requestID, store.ErrExpired)
	}
	return a.Clone(), nil
}

// PruneAnswers implements [store.Store.PruneAnswers].
func (s *Store) PruneAnswers(ctx context.Context, before time.Time) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for k, a := range s.answers {
		if a.Created.Before(before) {
			delete(s.answers, k)
			n++
		}
	}
	return n, nil
}

// PutApproval implements [store.Store.PutApproval].
func (s *Store) PutApproval(ctx context.Context, a store.Approval) error {
	if a.Instance == "" {
		return fmt.Errorf("memstore: approval without instance: %w", store.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	a.Updated = utc(a.Updated)
	s.approvals[approvalKey{a.Instance, a.Project}] = a
	return nil
}

// CreateApproval implements [store.Store.CreateApproval].
func (s *Store) CreateApproval(ctx context.Context, a store.Approval) (store.Approval, bool, error) {
	if a.Instance == "" {
		return store.Approval{}, false, fmt.Errorf("memstore: approval without instance: %w", store.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return store.Approval{}, false, err
	}
	defer s.mu.Unlock()
	k := approvalKey{a.Instance, a.Project}
	if cur, ok := s.approvals[k]; ok {
		return cur, false, nil
	}
	a.Updated = utc(a.Updated)
	s.approvals[k] = a
	return a, true, nil
}

// GetApproval implements [store.Store.GetApproval].
func (s *Store) GetApproval(ctx context.Context, instance string, project int64) (store.Approval, error) {
	if err := s.lock(ctx); err != nil {
		return store.Approval{}, err
	}
	defer s.mu.Unlock()
	a, ok := s.approvals[approvalKey{instance, project}]
	if !ok {
		return store.Approval{}, fmt.Errorf("memstore: approval %s/%d: %w", instance, project, store.ErrNotFound)
	}
	return a, nil
}

// ListApprovals implements [store.Store.ListApprovals].
func (s *Store) ListApprovals(ctx context.Context) ([]store.Approval, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := slices.Collect(maps.Values(s.approvals))
	slices.SortFunc(out, func(a, b store.Approval) int {
		return cmp.Or(cmp.Compare(a.Instance, b.Instance), cmp.Compare(a.Project, b.Project))
	})
	return out, nil
}

// CreatePrincipal implements [store.Store.CreatePrincipal].
func (s *Store) CreatePrincipal(ctx context.Context, p store.Principal) error {
	if p.ID == "" {
		return fmt.Errorf("memstore: principal without ID: %w", store.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := s.principals[p.ID]; ok {
		return fmt.Errorf("memstore: principal %s exists: %w", p.ID, store.ErrConflict)
	}
	p = p.Clone()
	p.Created, p.RemovedAt = utc(p.Created), utc(p.RemovedAt)
	s.principals[p.ID] = p
	return nil
}

// GetPrincipal implements [store.Store.GetPrincipal].
func (s *Store) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	if err := s.lock(ctx); err != nil {
		return store.Principal{}, err
	}
	defer s.mu.Unlock()
	p, ok := s.principals[id]
	if !ok {
		return store.Principal{}, fmt.Errorf("memstore: principal %s: %w", id, store.ErrNotFound)
	}
	return p.Clone(), nil
}

// ListPrincipals implements [store.Store.ListPrincipals].
func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []store.Principal
	for _, id := range slices.Sorted(maps.Keys(s.principals)) {
		out = append(out, s.principals[id].Clone())
	}
	return out, nil
}

// RemovePrincipal implements [store.Store.RemovePrincipal].
func (s *Store) RemovePrincipal(ctx context.Context, id string, at time.Time) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	p, ok := s.principals[id]
	if !ok {
		return fmt.Errorf("memstore: principal %s: %w", id, store.ErrNotFound)
	}
	if !p.Removed {
		p.Removed, p.RemovedAt = true, utc(at)
		s.principals[id] = p
	}
	return nil
}

// CreateToken implements [store.Store.CreateToken].
func (s *Store) CreateToken(ctx context.Context, tok store.Token) error {
	if tok.Hash == (store.Hash{}) {
		return fmt.Errorf("memstore: token without hash: %w", store.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, ok := s.tokens[tok.Hash]; ok {
		return fmt.Errorf("memstore: token exists: %w", store.ErrConflict)
	}
	tok.Created, tok.Expires, tok.UsedAt = utc(tok.Created), utc(tok.Expires), utc(tok.UsedAt)
	s.tokens[tok.Hash] = tok
	return nil
}

// UseToken implements [store.Store.UseToken].
func (s *Store) UseToken(ctx context.Context, h store.Hash, kind store.PrincipalKind, usedBy string, now time.Time) (store.Token, error) {
	if err := s.lock(ctx); err != nil {
		return store.Token{}, err
	}
	defer s.mu.Unlock()
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
}

// ListTokens implements [store.Store.ListTokens].
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := slices.Collect(maps.Values(s.tokens))
	slices.SortFunc(out, func(a, b store.Token) int {
		return cmp.Or(a.Created.Compare(b.Created), slices.Compare(a.Hash[:], b.Hash[:]))
	})
	return out, nil
}

// AppendAudit implements [store.Store.AppendAudit].
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	if err := s.lock(ctx); err != nil {
		return store.AuditEntry{}, err
	}
	defer s.mu.Unlock()
	e.Seq = uint64(len(s.audit)) + 1
	e.Time = utc(e.Time)
	s.audit = append(s.audit, e)
	return e, nil
}

// ListAudit implements [store.Store.ListAudit].
func (s *Store) ListAudit(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []store.AuditEntry
	for i := len(s.audit) - 1; i >= 0 && (limit <= 0 || len(out) < limit); i-- {
		out = append(out, s.audit[i])
	}
	return out, nil
}

// GetMeta implements [store.Store.GetMeta].
func (s *Store) GetMeta(ctx context.Context, key string) ([]byte, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	v, ok := s.meta[key]
	if !ok {
		return nil, fmt.Errorf("memstore: meta %q: %w", key, store.ErrNotFound)
	}
	return slices.Clone(v), nil
}

// PutMeta implements [store.Store.PutMeta].
func (s *Store) PutMeta(ctx context.Context, key string, value []byte) error {
	if key == "" {
		return fmt.Errorf("memstore: empty meta key: %w", store.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.meta[key] = append([]byte{}, value...)
	return nil
}

// InitMeta implements [store.Store.InitMeta].
func (s *Store) InitMeta(ctx context.Context, key string, value []byte) ([]byte, error) {
	if key == "" {
		return nil, fmt.Errorf("memstore: empty meta key: %w", store.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	v, ok := s.meta[key]
	if !ok {
		v = append([]byte{}, value...)
		s.meta[key] = v
	}
	return slices.Clone(v), nil
}

// Close implements [store.Store.Close]. Closing twice is not an error.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
