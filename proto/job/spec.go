package job

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Kind names the payload of a [JobSpec]. Unknown kinds decode as their raw
// string; [Kind.Known] tells them apart.
type Kind string

// Job spec kinds.
const (
	// KindGitLabCI is a GitLab CI job translated by vk-gitlab; payload [CiJob].
	KindGitLabCI Kind = "gitlab_ci"
)

// Known reports whether k is a kind this version of the protocol defines.
func (k Kind) Known() bool { return k == KindGitLabCI }

// MaxSpecBytes is the largest JobSpec the hub accepts, in bytes of its
// compact JSON encoding (API-35: 512 KiB).
const MaxSpecBytes = 512 << 10

// Errors returned by this package.
var (
	// ErrTooLarge: the spec's encoding exceeds MaxSpecBytes (API-35; the
	// hub answers 413 too_large).
	ErrTooLarge = errors.New("job: spec too large")
	// ErrUnknownKind: the spec's kind is empty or not one this version knows.
	ErrUnknownKind = errors.New("job: unknown spec kind")
	// ErrInvalid: the spec is malformed (payload missing or not matching its kind).
	ErrInvalid = errors.New("job: invalid spec")
)

// JobSpec is the job a relay submits and a node runs, a union tagged by
// Kind (PROTO-12). Exactly the payload field named by Kind is set.
//
// Set by the relay; carried unchanged by the hub to the node in a start.
type JobSpec struct {
	// Kind says which payload field is set. Required.
	Kind Kind `json:"kind"`
	// GitLabCI is the payload of KindGitLabCI; nil for any other kind.
	GitLabCI *CiJob `json:"gitlab_ci,omitempty"`
}

// NewGitLabCI returns a JobSpec of kind gitlab_ci wrapping j (not copied).
func NewGitLabCI(j *CiJob) JobSpec { return JobSpec{Kind: KindGitLabCI, GitLabCI: j} }

// Validate checks the union's shape (a known kind with its payload) and
// the payload's required fields ([CiJob.Validate]). It returns an error
// wrapping ErrUnknownKind or ErrInvalid.
func (s JobSpec) Validate() error {
	switch s.Kind {
	case KindGitLabCI:
		if s.GitLabCI == nil {
			return fmt.Errorf("%w: kind %q without its payload", ErrInvalid, s.Kind)
		}
		return s.GitLabCI.Validate()
	case "":
		return fmt.Errorf("%w: kind missing", ErrUnknownKind)
	default:
		return fmt.Errorf("%w: %q", ErrUnknownKind, s.Kind)
	}
}

// Size returns the length in bytes of s's compact JSON encoding, the size
// MaxSpecBytes limits.
func (s JobSpec) Size() (int, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return 0, fmt.Errorf("job: encode spec: %w", err)
	}
	return len(b), nil
}

// CheckSize returns an error wrapping ErrTooLarge when s serializes to more
// than MaxSpecBytes (API-35).
func (s JobSpec) CheckSize() error {
	n, err := s.Size()
	if err != nil {
		return err
	}
	if n > MaxSpecBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, n, MaxSpecBytes)
	}
	return nil
}

// Redacted returns a deep copy of s with every secret removed; see
// [CiJob.Redacted]. Unknown kinds carry no payload and are copied as is.
func (s JobSpec) Redacted() JobSpec {
	out := JobSpec{Kind: s.Kind}
	if s.GitLabCI != nil {
		r := s.GitLabCI.Redacted()
		out.GitLabCI = &r
	}
	return out
}
