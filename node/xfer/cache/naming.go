package cache

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/vk-ci/vk/internal/cacherepo"
)

// ErrBadRepository is returned when a repository name is not a valid OCI
// repository name (the same value as [cacherepo.ErrBadRepository]).
var ErrBadRepository = cacherepo.ErrBadRepository

// Repository returns the cache repository of a project (XFER-07):
// "ci-cache/<gitlab host>[/<gitlab path>]/<project id>" under the node's
// optional repository prefix; see [cacherepo.Repository], which the hub
// shares to name a job's own repository (XFER-13).
func Repository(prefix, gitlabURL string, projectID int64) (string, error) {
	return cacherepo.Repository(prefix, gitlabURL, projectID)
}

// ValidRepository checks name against the OCI repository grammar
// (slash-separated components, at most 255 characters).
func ValidRepository(name string) error { return cacherepo.Valid(name) }

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
