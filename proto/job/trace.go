package job

// DefaultTraceLimitBytes is the trace limit when a runner sets no
// output_limit: 4 MiB (TRACE-08).
const DefaultTraceLimitBytes = 4 << 20

// TraceSettings say how the node shapes the job's output (SPEC-19, TRACE-05,
// TRACE-08). Timestamps are governed by the FF_TIMESTAMPS variable; see
// [CiJob.Timestamps].
type TraceSettings struct {
	// Sections: write section markers (features.trace_sections).
	Sections bool `json:"sections,omitempty"`
	// TokenMaskPrefixes are token prefixes to mask wherever they appear
	// (features.token_mask_prefixes), e.g. "glpat-".
	TokenMaskPrefixes []string `json:"token_mask_prefixes,omitempty"`
	// LimitBytes is where the node cuts the trace, in bytes of the trace as
	// GitLab stores it (the runner's output_limit; the relay fills in
	// DefaultTraceLimitBytes). 0 is invalid.
	LimitBytes int64 `json:"limit_bytes"`
}
