package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// ErrBadRepository is returned when a repository name is not a valid OCI
// repository name.
var ErrBadRepository = errors.New("cache: not a valid repository name")

// repoComponent is the OCI distribution path-component grammar.
var (
	repoComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$`)
	badChars      = regexp.MustCompile(`[^a-z0-9._-]+`)
	sepRuns       = regexp.MustCompile(`[._-]{2,}`)
)

// sanitizeComponent lower-cases s and rewrites it into a valid path
// component: characters outside [a-z0-9._-] (":" of a port, "~", …)
// become "-", runs of separators collapse to their first character, and
// separators at either end are dropped.
func sanitizeComponent(s string) string {
	s = strings.ToLower(s)
	s = badChars.ReplaceAllString(s, "-")
	s = sepRuns.ReplaceAllStringFunc(s, func(m string) string {
		if strings.Trim(m, "-") == "" {
			return m // "-+" is valid as is
		}
		return m[:1]
	})
	return strings.Trim(s, "._-")
}

// Repository returns the cache repository of a project (XFER-07):
// "ci-cache/<gitlab host>[/<gitlab path>]/<project id>", each component
// lower-cased and sanitized (the port's ":" becomes "-"), under the
// node's optional repository prefix. gitlabURL is GitLab's URL as the
// relay was configured with it (its user info, query and fragment are
// ignored).
func Repository(prefix, gitlabURL string, projectID int64) (string, error) {
	u, err := url.Parse(gitlabURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%w: GitLab URL %q", ErrBadRepository, gitlabURL)
	}
	parts := []string{"ci-cache", sanitizeComponent(u.Host)}
	for _, p := range strings.Split(u.Path, "/") {
		if c := sanitizeComponent(p); c != "" {
			parts = append(parts, c)
		}
	}
	parts = append(parts, strconv.FormatInt(projectID, 10))
	repo := strings.Join(parts, "/")
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		repo = prefix + "/" + repo
	}
	if err := ValidRepository(repo); err != nil {
		return "", err
	}
	return repo, nil
}

// ValidRepository checks name against the OCI repository grammar
// (slash-separated components, at most 255 characters).
func ValidRepository(name string) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("%w: %q", ErrBadRepository, name)
	}
	for _, c := range strings.Split(name, "/") {
		if !repoComponent.MatchString(c) {
			return fmt.Errorf("%w: %q", ErrBadRepository, name)
		}
	}
	return nil
}

// Tag returns the tag of a cache key (XFER-08): "protected-<sha256 hex>"
// or "unprotected-<sha256 hex>" of the key, so a protected and an
// unprotected ref never share a cache even if their keys were equal.
func Tag(key string, protected bool) string {
	p := "unprotected-"
	if protected {
		p = "protected-"
	}
	return p + KeyDigest(key)
}

// KeyDigest is the hex SHA-256 of key; with a job registry token it is
// the whole tag (XFER-13).
func KeyDigest(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}
