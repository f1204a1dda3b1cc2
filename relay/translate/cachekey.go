package translate

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"unicode"

	"github.com/vk-ci/vk/proto/job"
)

// ErrCacheKey reports a cache key that sanitises to nothing (e.g. "..",
// "/", "%2E%2E"); gitlab-runner skips such a cache with a notice. Errors
// from [SanitizeCacheKey] are *CacheKeyError values matching it.
var ErrCacheKey = errors.New("translate: cache key could not be sanitized")

// CacheKeyError is a cache key that could not be sanitised. Its message is
// gitlab-runner's: `cache key "<key>" could not be sanitized`.
type CacheKeyError struct {
	// Key is the key as given.
	Key string
}

// Error implements error.
func (e *CacheKeyError) Error() string {
	return fmt.Sprintf("cache key %q could not be sanitized", e.Key)
}

// Is reports whether target is ErrCacheKey.
func (e *CacheKeyError) Is(target error) bool { return target == ErrCacheKey }

// keyNormaliser decodes URL-encoded slashes and dots and turns backslashes
// into slashes, in one pass (gitlab-runner cache/cachekey).
var keyNormaliser = strings.NewReplacer("%2f", "/", "%2F", "/", "%2e", ".", "%2E", ".", `\`, "/")

// SanitizeCacheKey normalises a cache key as gitlab-runner 19.5's
// cache/cachekey.Sanitize does with FF_HASH_CACHE_KEYS off (SPEC-16,
// SPEC-28):
//
//  1. decode %2f/%2F to "/" and %2e/%2E to "."; turn every "\" into "/";
//  2. clean the path as if rooted at "/" ("." and ".." resolved, "//"
//     collapsed; ".." never climbs above the root);
//  3. drop the leading "/", strip trailing white space from the last
//     segment and drop trailing segments left empty, repeatedly.
//
// "" stays "" without error. A non-empty key that ends up empty fails with
// a *CacheKeyError (errors.Is ErrCacheKey).
func SanitizeCacheKey(key string) (string, error) {
	if key == "" {
		return "", nil
	}
	cleaned := path.Clean("/" + keyNormaliser.Replace(key))
	parts := strings.Split(cleaned[1:], "/")
	n := len(parts)
	for n > 0 {
		parts[n-1] = strings.TrimRightFunc(parts[n-1], unicode.IsSpace)
		if parts[n-1] != "" {
			break
		}
		n--
	}
	out := strings.Join(parts[:n], "/")
	if out == "" {
		return "", &CacheKeyError{Key: key}
	}
	return out, nil
}

// expander expands $NAME and ${NAME} references the way gitlab-runner
// expands a cache key: os.Expand over the build's variables after one
// pass of expanding their own values (Variables.Expand, raw variables left
// alone), the last of duplicated keys winning.
//
// Its source is the spec's variables: the job's and the runner's own. What
// only the node knows expands to nothing: variables the node sets
// (CI_PROJECT_DIR, CI_BUILDS_DIR, CI_CONCURRENT_ID, CI_JOB_STATUS,
// CI_SERVER_TLS_CA_FILE, …, being absent from the source) and the value of
// a file variable, which is the path of a file on the node.
type expander struct {
	vars []job.Variable // values already expanded once
}

func newExpander(vars []job.Variable) expander {
	raw := expander{vars: vars}
	expanded := make([]job.Variable, len(vars))
	for i, v := range vars {
		if !v.Raw {
			v.Value = raw.expand(v.Value)
		}
		expanded[i] = v
	}
	return expander{vars: expanded}
}

// get is gitlab-runner's Variables.Get for expansion: "$" for "$$", shell
// specials empty, file variables their (node-side, so empty) path.
func (e expander) get(name string) string {
	switch name {
	case "$":
		return "$"
	case "*", "#", "@", "!", "?", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9":
		return ""
	}
	for i := len(e.vars) - 1; i >= 0; i-- {
		if e.vars[i].Key == name {
			if e.vars[i].File {
				return ""
			}
			return e.vars[i].Value
		}
	}
	return ""
}

func (e expander) expand(s string) string { return os.Expand(s, e.get) }
