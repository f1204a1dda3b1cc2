// Package cacherepo names the registry repositories that hold a project's
// CI caches (XFER-07), for the two sides that must agree on them: the
// node, which keeps caches there with its own credential, and the hub,
// which names the repository in the registry token it mints for a job
// (XFER-13). It imports the standard library only.
package cacherepo

import (
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
// optional repository prefix. gitlabURL is GitLab's URL as the relay was
// configured with it (its user info, query and fragment are ignored).
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
	if err := Valid(repo); err != nil {
		return "", err
	}
	return repo, nil
}

// Protection names the protection of a job's ref as the last component of
// a job's own cache repository (XFER-13): "protected" or "unprotected".
// A protected and an unprotected job therefore never share a repository,
// as node-credential caches never share a tag (XFER-08).
func Protection(protected bool) string {
	if protected {
		return "protected"
	}
	return "unprotected"
}

// JobRepository is the repository a job's registry token grants (XFER-13):
// the project's [Repository] under prefix with the protection of the
// job's ref appended, e.g. "ci-cache/gitlab.example.com/42/protected".
func JobRepository(prefix, gitlabURL string, projectID int64, protected bool) (string, error) {
	repo, err := Repository(prefix, gitlabURL, projectID)
	if err != nil {
		return "", err
	}
	repo += "/" + Protection(protected)
	if err := Valid(repo); err != nil {
		return "", err
	}
	return repo, nil
}

// Valid checks name against the OCI repository grammar (slash-separated
// components, at most 255 characters).
func Valid(name string) error {
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
