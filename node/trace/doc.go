// Package trace turns a job's output into the trace GitLab stores, the way
// gitlab-runner's buildlogger does (TRACE-01..09, NODE-10).
//
// Each [Stream] (the node's own lines as stream 00, the job's stdout and
// stderr as stream 01 O and E) has its own pipeline:
//
//	UTF-8 sanitiser → masked values → URL parameters → token prefixes → timestamper ─┐
//	                                                                                 ├→ limit → out
//	(other streams, same pipeline each) ─────────────────────────────────────────────┘
//
// Masking happens before stamping (TRACE-02), so stamps are never masked and
// count towards the limit. Every masker is streaming: it holds back the
// shortest tail of a write that could still grow into a secret, so a value
// split across writes is masked all the same. Every byte of every
// occurrence of a masked value is masked, overlapping occurrences included
// (one [Masked] per occurrence of the run's cover, so touching values read
// "[MASKED][MASKED]" as with gitlab-runner); a mask reaches the later
// maskers as a mask, not as bytes, and a token or URL value goes on after
// it (glsoat-[MASKED][MASKED], never glsoat-[MASKED] followed by the rest
// of the token). The timestamper follows
// gitlab-runner's rules byte for byte (a header when a line starts, '+' for
// continuations after a '\r' flush or the 8 KiB bound, a partial line
// flushed with an added '\n' on Close). The limit cuts the write crossing it
// (never inside a UTF-8 character), appends gitlab-runner's notice, and drops
// everything after; [Trace.Len] is then the offset the node reports.
//
// Choices where gitlab-runner gives no guidance:
//   - Invalid UTF-8 is replaced per stream, before masking, rather than in
//     the final buffer: stamps and markers are ASCII, so the bytes are the
//     same, and streams interleaving cannot split a sequence.
//   - A masked value overlapping another is masked whole, where
//     gitlab-runner, masking the longest value first, leaves the other's
//     remaining bytes (docs/gitlab-compat.md).
//   - When two token prefixes match at the same position the shorter one
//     (first in the (length, bytes) order) is kept; either way the value is
//     masked.
package trace
