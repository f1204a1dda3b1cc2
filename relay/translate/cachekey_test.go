package translate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"pgregory.net/rapid"

	"github.com/vk-ci/vk/proto/job"
)

// Port of gitlab-runner's cache/cachekey TestSanitize: all 66 rows of
// cachekey_sanitize_cases.json.
// spec: SPEC-28, SPEC-16, SPEC-01
func TestSanitizeCacheKey(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "cachekey_sanitize_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Raw      string `json:"raw"`
		Expected string `json:"expected"`
		Error    bool   `json:"error"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) != 66 {
		t.Fatalf("%d cases, want gitlab-runner's 66", len(cases))
	}
	for _, tc := range cases {
		got, err := SanitizeCacheKey(tc.Raw)
		if tc.Error {
			var ke *CacheKeyError
			if !errors.Is(err, ErrCacheKey) || !errors.As(err, &ke) || ke.Key != tc.Raw {
				t.Errorf("SanitizeCacheKey(%q) = %q, %v; want ErrCacheKey", tc.Raw, got, err)
			}
			if want := fmt.Sprintf("cache key %q could not be sanitized", tc.Raw); err != nil && err.Error() != want {
				t.Errorf("error = %q, want %q", err, want)
			}
			continue
		}
		if err != nil || got != tc.Expected {
			t.Errorf("SanitizeCacheKey(%q) = %q, %v; want %q", tc.Raw, got, err, tc.Expected)
		}
	}
}

// Properties of sanitised keys: relative, no empty segment, "." and ".."
// only as the last segment (gitlab-runner trims white space after
// cleaning, so ". " gives "."; kept for fidelity, harmless since cache tags
// hash the key), no trailing white space, no backslash or encoded slash or
// dot left; sanitising a key without such a last segment changes nothing.
// spec: SPEC-28
func TestSanitizeCacheKeyProperties(t *testing.T) {
	alphabet := []rune{'a', 'b', '.', '/', '\\', ' ', '\t', '%', '2', 'e', 'E', 'f', 'F', '5', 'c'}
	rapid.Check(t, func(t *rapid.T) {
		raw := string(rapid.SliceOf(rapid.SampledFrom(alphabet)).Draw(t, "raw"))
		got, err := SanitizeCacheKey(raw)
		if err != nil {
			if raw == "" || got != "" {
				t.Fatalf("SanitizeCacheKey(%q) = %q, %v", raw, got, err)
			}
			return
		}
		if raw == "" {
			if got != "" {
				t.Fatalf("empty key gave %q", got)
			}
			return
		}
		segs := strings.Split(got, "/")
		if last := segs[len(segs)-1]; last != "." && last != ".." {
			again, err := SanitizeCacheKey(got)
			if err != nil || again != got {
				t.Fatalf("not idempotent: %q → %q → %q, %v", raw, got, again, err)
			}
		}
		if strings.HasPrefix(got, "/") || strings.Contains(got, `\`) || strings.Contains(strings.ToLower(got), "%2f") || strings.Contains(strings.ToLower(got), "%2e") {
			t.Fatalf("SanitizeCacheKey(%q) = %q", raw, got)
		}
		for i, seg := range segs {
			if seg == "" || (seg == "." || seg == "..") && i < len(segs)-1 {
				t.Fatalf("SanitizeCacheKey(%q) = %q has segment %q", raw, got, seg)
			}
		}
		if r := []rune(got); unicode.IsSpace(r[len(r)-1]) {
			t.Fatalf("SanitizeCacheKey(%q) = %q ends in white space", raw, got)
		}
	})
}

// Expansion follows gitlab-runner's Variables semantics.
// spec: SPEC-16
func TestExpander(t *testing.T) {
	vars := []job.Variable{
		{Key: "A", Value: "a"},
		{Key: "B", Value: "$A-b"},
		{Key: "C", Value: "$B-c"},
		{Key: "RAW", Value: "$A", Raw: true},
		{Key: "FILE", Value: "secret content", File: true},
		{Key: "DUP", Value: "first"},
		{Key: "DUP", Value: "last"},
	}
	x := newExpander(vars)
	tests := map[string]string{
		"$A":              "a",
		"${A}":            "a",
		"$B":              "a-b",    // B's value expanded once
		"$C":              "$A-b-c", // …only once: C saw B's raw value
		"$RAW":            "$A",     // raw values are not expanded
		"$FILE":           "",       // a file variable is a path on the node
		"$DUP":            "last",   // last wins
		"$CI_PROJECT_DIR": "",       // node-only
		"x$$y":            "x$y",    // $$ is $
		"$1$*$#$?":        "",       // shell specials
		"${}":             "",       // bad syntax is eaten, as os.Expand does
		"plain":           "plain",  // nothing to expand
		"$A/${B}/$NOPE/z": "a/a-b//z",
	}
	for in, want := range tests {
		if got := x.expand(in); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
