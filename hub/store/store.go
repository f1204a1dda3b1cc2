// Package store defines what the hub keeps durably, as narrow roles
// ([Records], [Answers], [Principals], [Approvals], [Audit], [Meta]) that
// [Store] gathers (STYLE C8), and how an implementation is chosen
// ([Open], [Register]).
//
// Implementations: hub/store/boltstore (the default: one bbolt file in the
// state directory, fsynced on every commit) and hub/store/memstore (tests
// and vk-sim, selected with "mem:"). hub/store/storetest is the conformance
// suite both pass. The interface speaks only in plain values — no
// transactions, file paths or bbolt types leak out — so a networked
// database (PostgreSQL, for hub high availability, DESIGN "Later") can
// implement it too. Every method is atomic on its own and safe for
// concurrent use; methods that read-modify-write take a function, which an
// implementation may call more than once (optimistic retry), so it must
// have no side effects outside the value it edits.
//
// What is kept: job records (with the redacted spec only, AUTH-07),
// claimed admissions (DECISIONS 6), request_id answers (API-42/43),
// project and server approvals, enrolled principals (relays and nodes) and
// one-time enrolment tokens, an audit log, and small meta values such as
// the scheduler's seed. Job output is not here: see hub/output.
//
// Byte slices handed to a Store are copied before it returns, and byte
// slices it returns are the caller's own: neither side can change the
// other's data afterwards.
package store

import (
	"context"
	"errors"
)

// Sentinel errors. Implementations return them wrapped with %w and more
// context; test with errors.Is.
var (
	// ErrNotFound: no record with that key (never stored, deleted or pruned).
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: a create found the key taken, a compare failed (job
	// revision), or an enrolment token was already used.
	ErrConflict = errors.New("store: conflict")
	// ErrExpired: the record exists but its lifetime is over (a request_id
	// answer past [AnswerTTL] or whose job was dropped; an enrolment token
	// past its expiry).
	ErrExpired = errors.New("store: expired")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrInvalid: a record lacks its key fields (empty ID, zero time where
	// one is required).
	ErrInvalid = errors.New("store: invalid record")
)

// Store is the hub's durable state: every role below, and Close. See the
// package doc for the contract shared by all methods (atomicity,
// concurrency, copying). Every method returns an error wrapping
// [ErrClosed] after [Store.Close]. Consumers ask for the roles they use
// (or fewer methods still, in an interface of their own); a backend
// implements the roles one by one, each with its conformance suite in
// hub/store/storetest.
type Store interface {
	Records
	Answers
	Principals
	Approvals
	Audit
	Meta

	// CreateJobAnswered stores a new job record and the request_id answer
	// to the create that made it (API-42) in one atomic, durable write:
	// after it returns, both are there or neither is. A job record is thus
	// never durable without its answer, and a create retried after a crash
	// replays the job it made instead of finding no answer (the hub writes
	// a submission's job and answer with it; CreateJob and PutAnswer stay
	// for records without one). a.Job must name j; ErrInvalid otherwise or
	// as CreateJob and PutAnswer refuse them. ErrConflict, writing nothing,
	// if the job ID exists or a live answer exists for a's principal and
	// request_id; an expired answer is replaced, as PutAnswer does.
	CreateJobAnswered(ctx context.Context, j Job, a Answer) error

	// Close releases the store. Everything written before it returned was
	// durable already (for implementations that persist).
	Close() error
}

// Records are the hub's job records and claimed admissions: what the
// driver writes as jobs move and reloads after a restart (FAIL-19,
// DECISIONS 6).
type Records interface {
	// CreateJob stores a new job record. ErrConflict if the ID exists;
	// ErrInvalid without an ID. The record is stored as given (Revision
	// included).
	CreateJob(ctx context.Context, j Job) error
	// GetJob returns a job record, or ErrNotFound.
	GetJob(ctx context.Context, id string) (Job, error)
	// SaveJob replaces the record of an existing job with j, as given
	// (Revision included), without reading the record it replaces: the
	// hub's record writer, which holds the latest record of each job in
	// memory, saves with it. ErrNotFound if no job j.ID exists (a deleted
	// job stays deleted); ErrInvalid without an ID.
	SaveJob(ctx context.Context, j Job) error
	// UpdateJob atomically loads a job, applies fn to it and stores the
	// result, which it returns. fn may be called more than once; an error
	// from fn aborts the update and is returned as is. fn must not change
	// the ID. ErrNotFound if the job does not exist.
	UpdateJob(ctx context.Context, id string, fn func(*Job) error) (Job, error)
	// ListJobs returns the jobs, ordered by ID; with unsettledOnly, only
	// those not yet settled (what a restarted hub reloads, FAIL-19).
	ListJobs(ctx context.Context, unsettledOnly bool) ([]Job, error)
	// DeleteJob removes a job from the hub's history. request_id answers
	// that name it then read as expired (API-43: 410 not_found).
	// ErrNotFound if absent.
	DeleteJob(ctx context.Context, id string) error

	// PutAdmission stores or replaces a claimed admission (DECISIONS 6).
	PutAdmission(ctx context.Context, a Admission) error
	// GetAdmission returns a claimed admission, or ErrNotFound.
	GetAdmission(ctx context.Context, id string) (Admission, error)
	// ListAdmissions returns all claimed admissions, ordered by ID.
	ListAdmissions(ctx context.Context) ([]Admission, error)
	// DeleteAdmission removes a claimed admission once it ended. Deleting
	// one that is absent is not an error (ending is idempotent).
	DeleteAdmission(ctx context.Context, id string) error
}

// Answers are the first answers to creates by request_id, which make
// retried API requests idempotent (API-42, API-43).
type Answers interface {
	// PutAnswer records the first answer to a create under its request_id
	// (API-42). ErrConflict if a live (unexpired, undropped) answer exists
	// for the same principal and request_id; an expired one is replaced.
	PutAnswer(ctx context.Context, a Answer) error
	// GetAnswer returns the answer to principal's request_id. It returns
	// ErrNotFound if none was ever recorded (or it was pruned), and the
	// answer together with an error wrapping ErrExpired if it is older than
	// [AnswerTTL] at now or its job was deleted (API-43).
	GetAnswer(ctx context.Context, principal, requestID string, now Time) (Answer, error)
	// PruneAnswers forgets answers created before before, so that their
	// request_ids read ErrNotFound again; it returns how many it removed.
	// The hub calls it with now - 2*AnswerTTL, keeping expired answers
	// visible as expired for a further day.
	PruneAnswers(ctx context.Context, before Time) (int, error)
}

// Approvals are the operator's decisions on GitLab projects and servers
// (OPS-06).
type Approvals interface {
	// PutApproval stores or replaces a project's (or with Project 0 a
	// GitLab server's) approval state.
	PutApproval(ctx context.Context, a Approval) error
	// CreateApproval stores a only if (a.Instance, a.Project) has no
	// approval yet, in one step; otherwise it returns the approval already
	// there with created false, changing nothing but an empty Path, which
	// it takes from a (an operator may decide before the hub has seen the
	// project or server). The hub records a first sighting with it, so an
	// operator's decision written meanwhile is never overwritten.
	CreateApproval(ctx context.Context, a Approval) (current Approval, created bool, err error)
	// GetApproval returns an approval, or ErrNotFound if never seen.
	GetApproval(ctx context.Context, instance string, project int64) (Approval, error)
	// ListApprovals returns all approvals ordered by instance, project.
	ListApprovals(ctx context.Context) ([]Approval, error)
}

// Principals are the enrolled relays and nodes and the one-time tokens
// they enrol with.
type Principals interface {
	// CreatePrincipal enrolls a relay or node. ErrConflict if the ID exists.
	CreatePrincipal(ctx context.Context, p Principal) error
	// GetPrincipal returns a principal, removed ones included (check
	// Removed), or ErrNotFound.
	GetPrincipal(ctx context.Context, id string) (Principal, error)
	// ListPrincipals returns all principals, removed ones included, by ID.
	ListPrincipals(ctx context.Context) ([]Principal, error)
	// RemovePrincipal marks a principal removed at the given time; its
	// record stays (audit, refusing its key). Removing a removed principal
	// changes nothing. ErrNotFound if absent.
	RemovePrincipal(ctx context.Context, id string, at Time) error

	// CreateToken stores a one-time enrolment token by its hash.
	// ErrConflict if that hash exists.
	CreateToken(ctx context.Context, tok Token) error
	// UseToken atomically consumes the token with hash h for kind at now,
	// recording usedBy, and returns it. ErrNotFound if unknown or of
	// another kind, ErrExpired if past its expiry, ErrConflict if already
	// used.
	UseToken(ctx context.Context, h Hash, kind PrincipalKind, usedBy string, now Time) (Token, error)
	// ListTokens returns all tokens, ordered by creation time.
	ListTokens(ctx context.Context) ([]Token, error)
}

// Audit is the append-only log of who changed what.
type Audit interface {
	// AppendAudit appends an entry and returns it with its sequence number
	// (1, 2, …; strictly increasing, never reused).
	AppendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error)
	// ListAudit returns up to limit entries, newest first; limit <= 0
	// means all.
	ListAudit(ctx context.Context, limit int) ([]AuditEntry, error)
}

// Meta holds small named values: the capacity policy and operator
// settings the admin socket sets, the scheduler's seed, the ID floor.
type Meta interface {
	// GetMeta returns a meta value, or ErrNotFound.
	GetMeta(ctx context.Context, key string) ([]byte, error)
	// PutMeta stores or replaces a meta value. ErrInvalid for an empty key.
	PutMeta(ctx context.Context, key string, value []byte) error
	// InitMeta stores value under key unless the key already holds one, and
	// returns what the key holds afterwards (get-or-create, atomically).
	// ErrInvalid for an empty key.
	InitMeta(ctx context.Context, key string, value []byte) ([]byte, error)
}
