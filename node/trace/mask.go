package trace

import (
	"slices"
	"strings"
)

// Masked is the text every masked value, token or URL parameter value is
// replaced with, as gitlab-runner writes it.
const Masked = "[MASKED]"

var maskedBytes = []byte(Masked)

// DefaultTokenPrefixes are the token prefixes masked on every job, as
// gitlab-runner 19.5 masks them with FF_MASK_ALL_DEFAULT_TOKENS on (its
// default). The job's features.token_mask_prefixes are added to these.
var DefaultTokenPrefixes = []string{
	"glpat-", "gloas-", "gldt-", "glrt-", "glcbt-", "glrtr-", "glptt-", "glft-",
	"glimt-", "glagent-", "glsoat-", "glffct-", "_gitlab_session=", "gltok-",
}

// MaxTokenPrefixes is how many token prefixes apply after sorting by (length,
// bytes): gitlab-runner silently drops the rest, and so do we (TRACE-05).
const MaxTokenPrefixes = 15

// URLParams are the URL query parameters whose values are masked
// (case-insensitive key, after '?' or '&').
var URLParams = []string{
	"private_token", "authenticity_token", "rss_token",
	"X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
}

// filter is one streaming stage of a stream's pipeline: write may hold back
// a tail it cannot decide yet; flush emits everything held.
type filter interface {
	write(p []byte) error
	flush() error
}

// sink is where a filter sends its output. mask writes [Masked] for a
// value an earlier filter masked: the later filters pass it through without
// reading it, so a token run that a masked value interrupts goes on after
// it (as gitlab-runner's sanitisers let an upstream "[MASKED]" through).
type sink interface {
	write(p []byte) error
	mask() error
}

// UniquePhrases returns the values to mask the way gitlab-runner prepares
// them: trimmed of surrounding white space, empty ones dropped, duplicates
// removed. The order of first appearance is kept.
func UniquePhrases(values []string) []string {
	seen := make(map[string]bool, len(values))
	var out []string
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" || seen[v] {
			continue
		}
		seen[v] = true
		out = append(out, v)
	}
	return out
}

// EffectiveTokenPrefixes returns the prefixes that apply for a job supplying
// extra: the defaults plus extra, trimmed, de-duplicated, sorted by (length,
// bytes) and cut to [MaxTokenPrefixes].
func EffectiveTokenPrefixes(extra []string) []string {
	return effectiveTokenPrefixes(extra, DefaultTokenPrefixes)
}

// GlpatOnlyTokenPrefixes are the default token prefixes gitlab-runner masks
// with FF_MASK_ALL_DEFAULT_TOKENS off: glpat- alone.
var GlpatOnlyTokenPrefixes = []string{"glpat-"}

func effectiveTokenPrefixes(extra, defaults []string) []string {
	all := UniquePhrases(append(append([]string(nil), extra...), defaults...))
	slices.SortFunc(all, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	if len(all) > MaxTokenPrefixes {
		all = all[:MaxTokenPrefixes]
	}
	return all
}
