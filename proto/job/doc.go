// Package job defines the job spec the hub carries from a relay to a node:
// [JobSpec], a union tagged by kind, whose only kind today is
// [KindGitLabCI] with a [CiJob] payload (PROTO-12; SPEC-01..25).
//
// A CiJob is what vk-gitlab makes of GitLab's job response
// (gitlab-runner 19.5 common/spec/spec.go): everything the node needs to run
// the job, normalised so the node interprets nothing GitLab-specific
// (defaults filled in, cache keys expanded and sanitised, aliases split, empty
// artifact formats set to zip). What concerns only the conversation with
// GitLab (queue metrics, runner uuid, features.failure_reasons, …) stays in
// the relay and has no field here.
//
// # Wire form
//
// A JobSpec is encoded as {"kind": "gitlab_ci", "gitlab_ci": {…}}: the
// payload sits under a key named like its kind (adjacent tagging), so a
// decoder that does not know a kind keeps the kind string and no payload,
// and [JobSpec.Validate] reports [ErrUnknownKind] instead of mis-reading it.
//
// Field conventions: durations are integer seconds in fields ending _secs,
// sizes integer bytes in fields ending _bytes; IDs are GitLab's int64s.
// Optional scalars are omitted when zero (omitempty) unless the zero value
// differs in meaning from absence, in which case the field is a pointer and
// its doc says what nil means. Lists are omitted when empty; an empty and an
// absent list mean the same.
//
// # Secrets
//
// A CiJob carries secrets: the job token, dependency tokens, registry
// passwords, and the values of masked and file variables. The hub keeps them
// in memory only until a node accepted the job (AUTH-07); whatever it stores
// or logs is [CiJob.Redacted]. server_ca_pem is not a secret.
//
// # Size
//
// A spec is at most [MaxSpecBytes] serialized (API-35); [JobSpec.CheckSize]
// measures the compact encoding json.Marshal produces.
//
// # Timestamps
//
// There is deliberately no trace.timestamps field: FF_TIMESTAMPS is read
// from the job's variables only (TRACE-03), so a second copy could only
// disagree with it. [CiJob.Timestamps] reads it the way the node must.
//
// This package imports the standard library only (STYLE C5).
package job
