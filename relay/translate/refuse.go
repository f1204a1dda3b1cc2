package translate

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/vk-ci/vk/relay/gitlab"
)

// ErrRefused matches every *RefusalError: the job is one vk does not run.
var ErrRefused = errors.New("translate: job refused")

// ExitCodeUnsupportedOptions is the exit code gitlab-runner reports for a
// job with unknown executor_opts (common.ExitCodeUnsupportedOptions).
const ExitCodeUnsupportedOptions = 3

// RefusalError is a job the relay will not submit. The relay writes
// Message into the job's trace and fails the job in GitLab with
// [RefusalError.FailureReason] (mapped through [gitlab.MapFailureReason]
// for the job's GitLab) and ExitCode.
type RefusalError struct {
	// Failure is the vk failure kind (gitlab.FailureConfiguration or
	// gitlab.FailureSystem).
	Failure string
	// ExitCode to report; 0 means none.
	ExitCode int
	// Message explains the refusal for the trace (no styling; may span
	// lines, one per unsupported option set).
	Message string
	// Err is the underlying cause, if any.
	Err error
}

// Error implements error.
func (e *RefusalError) Error() string {
	if e.Err != nil && e.Err.Error() != e.Message {
		return fmt.Sprintf("translate: job refused (%s): %s: %v", e.Failure, e.Message, e.Err)
	}
	return fmt.Sprintf("translate: job refused (%s): %s", e.Failure, e.Message)
}

// Unwrap returns the cause.
func (e *RefusalError) Unwrap() error { return e.Err }

// Is reports whether target is ErrRefused.
func (e *RefusalError) Is(target error) bool { return target == ErrRefused }

// FailureReason is GitLab's failure_reason for the refusal before the
// older-GitLab fallback ([gitlab.FailureReasonFor]).
func (e *RefusalError) FailureReason() string { return gitlab.FailureReasonFor(e.Failure) }

// refuse returns the refusal for a job vk does not run, or nil.
func refuse(r *gitlab.JobResponse) error {
	if len(r.Secrets) > 0 {
		names := make([]string, 0, len(r.Secrets))
		for n := range r.Secrets {
			names = append(names, n)
		}
		sort.Strings(names)
		return &RefusalError{
			Failure: gitlab.FailureConfiguration,
			Message: fmt.Sprintf("this job uses CI/CD secrets (%s), which vk runners do not support (vault_secrets is not advertised)",
				strings.Join(names, ", ")),
		}
	}
	if r.Run != "" {
		return &RefusalError{
			Failure: gitlab.FailureConfiguration,
			Message: "this job uses the run: keyword (CI steps), which vk runners do not support (native_steps_integration is not advertised)",
		}
	}
	if err := r.UnsupportedOptions(); err != nil {
		// gitlab-runner writes the error to the trace and fails the job
		// with runner_system_failure and exit code 3.
		return &RefusalError{
			Failure:  gitlab.FailureSystem,
			ExitCode: ExitCodeUnsupportedOptions,
			Message:  err.Error(),
			Err:      err,
		}
	}
	return nil
}
