package client

import (
	"fmt"

	"github.com/vk-ci/vk/proto/internal/enum"
)

// JobResult is how a job ended (PROTO-09): sent by the node once all its
// output is acked (NODE-13), stored by the hub, shown in JobView.Result.
type JobResult struct {
	// Failure says why the job failed; empty means success (PROTO-10).
	Failure Failure `json:"failure,omitempty"`
	// ExitCode is the failing step's exit code, when a process exited; nil
	// when none did (success, or a failure before any step ran).
	ExitCode *int `json:"exit_code,omitempty"`
	// Message explains a failure in one line for logs; empty when none.
	Message string `json:"message,omitempty"`
	// OutputLen is the job's output length in bytes, all of it acked.
	OutputLen int64 `json:"output_len"`
	// Artifacts has one entry per artifact upload attempted or skipped, in
	// the spec's order (XFER-05); empty when the job had none.
	Artifacts []ArtifactUpload `json:"artifacts,omitempty"`
	// Usage is what the job used on the node; nil when the node sent none
	// (PROTO-11).
	Usage *Usage `json:"usage,omitempty"`
}

// Failure is why a job failed (PROTO-10, FAIL-02..11). Unknown values
// decode to FailureOther.
type Failure string

// Failures.
const (
	FailureScript             Failure = "script"              // a step exited non-zero
	FailureTimeout            Failure = "timeout"             // past timeout_secs
	FailureImagePull          Failure = "image_pull"          // image or service image not pulled or built
	FailureConfiguration      Failure = "configuration"       // unsupported job, node-policy refusal
	FailureExternalDependency Failure = "external_dependency" // clone, artifact or cache transfer failed
	FailureSystem             Failure = "system"              // VM, agent or host failure
	FailureInterrupted        Failure = "interrupted"         // node stopped or drained hard mid-job
	FailureCanceled           Failure = "canceled"            // canceled
	FailureNoCapacity         Failure = "no_capacity"         // not placed within place_within_secs
	FailureLost               Failure = "lost"                // node lost
	FailureOther              Failure = "other"               // not known to this version
)

var knownFailures = []Failure{FailureScript, FailureTimeout, FailureImagePull,
	FailureConfiguration, FailureExternalDependency, FailureSystem, FailureInterrupted,
	FailureCanceled, FailureNoCapacity, FailureLost, FailureOther}

// UnmarshalText maps unknown failures to FailureOther.
func (f *Failure) UnmarshalText(b []byte) error {
	*f = enum.Parse(string(b), FailureOther, knownFailures)
	return nil
}

// ArtifactOutcome is what came of one artifact upload (PROTO-09, XFER-05).
// Unknown values decode to ArtifactOther.
type ArtifactOutcome string

// Artifact outcomes.
const (
	ArtifactUploaded ArtifactOutcome = "uploaded"  // GitLab took it
	ArtifactSkipped  ArtifactOutcome = "skipped"   // not uploaded: its when did not match, or no files
	ArtifactTooLarge ArtifactOutcome = "too_large" // GitLab answered 413 (not retried, XFER-04)
	ArtifactFailed   ArtifactOutcome = "failed"    // any other failure
	ArtifactOther    ArtifactOutcome = "other"     // not known to this version
)

var knownArtifactOutcomes = []ArtifactOutcome{ArtifactUploaded, ArtifactSkipped, ArtifactTooLarge, ArtifactFailed, ArtifactOther}

// UnmarshalText maps unknown outcomes to ArtifactOther.
func (o *ArtifactOutcome) UnmarshalText(b []byte) error {
	*o = enum.Parse(string(b), ArtifactOther, knownArtifactOutcomes)
	return nil
}

// ArtifactUpload is one artifact's upload outcome (PROTO-09).
type ArtifactUpload struct {
	// Name is the artifact's name as in the spec.
	Name string `json:"name,omitempty"`
	// ArtifactType is the spec's artifact_type, e.g. "archive", "junit".
	ArtifactType string `json:"artifact_type,omitempty"`
	// Outcome is uploaded, skipped, too_large or failed. Required.
	Outcome ArtifactOutcome `json:"outcome"`
	// SizeBytes is the archive's size as sent; 0 when nothing was sent.
	SizeBytes int64 `json:"size_bytes,omitempty"`
	// Message explains a skip or failure; empty otherwise.
	Message string `json:"message,omitempty"`
}

// Usage is what a job used on its node (PROTO-11, NODE-14..17). Only
// WallMS is required; the other fields are 0 when not measured (no VM was
// up, or the executor cannot tell).
type Usage struct {
	// WallMS runs from the driver's start to the job's end, cleanup
	// included, in milliseconds (NODE-14). Required.
	WallMS int64 `json:"wall_ms"`
	// CPUMS is user plus system CPU time of the job's processes, in
	// milliseconds (NODE-16); 0 means not measured.
	CPUMS int64 `json:"cpu_ms,omitempty"`
	// PeakMemBytes is the summed peak resident memory (VmHWM) of the job's
	// processes, in bytes (NODE-16); 0 means not measured.
	PeakMemBytes int64 `json:"peak_mem_bytes,omitempty"`
	// CPUs is the size the job actually ran with, after hints, history and
	// clamping (NODE-17, DECISIONS 9); 0 means unknown.
	CPUs int `json:"cpus,omitempty"`
	// MemMiB is the memory the job ran with, in MiB (NODE-17, DECISIONS 9);
	// 0 means unknown.
	MemMiB int64 `json:"mem_mib,omitempty"`
}

// Validate checks the result's internal consistency: no negative lengths
// and known enum values. Errors wrap ErrInvalid.
func (r JobResult) Validate() error {
	if r.OutputLen < 0 {
		return fmt.Errorf("%w: result: negative output_len", ErrInvalid)
	}
	if r.Failure != "" && !enum.Known(r.Failure, knownFailures[:len(knownFailures)-1]) {
		return fmt.Errorf("%w: result: unknown failure %q", ErrInvalid, r.Failure)
	}
	for i, a := range r.Artifacts {
		if !enum.Known(a.Outcome, knownArtifactOutcomes[:len(knownArtifactOutcomes)-1]) {
			return fmt.Errorf("%w: result: artifact %d: outcome %q", ErrInvalid, i, a.Outcome)
		}
	}
	if r.Usage != nil && r.Usage.WallMS < 0 {
		return fmt.Errorf("%w: result: negative wall_ms", ErrInvalid)
	}
	return nil
}

// MetricLabel is the failure as a metrics label value, the same on hub
// and node: "success" for none.
func (f Failure) MetricLabel() string {
	if f == "" {
		return "success"
	}
	return string(f)
}
