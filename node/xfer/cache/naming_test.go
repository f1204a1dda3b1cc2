package cache

import (
	"errors"
	"regexp"
	"testing"

	"pgregory.net/rapid"
)

// spec: XFER-07
func TestRepository(t *testing.T) {
	tests := []struct {
		prefix, url string
		id          int64
		want        string
		err         error
	}{
		{"", "https://gitlab.com", 1, "ci-cache/gitlab.com/1", nil},
		{"", "https://GitLab.Example.com:8443/sub/Path/", 42, "ci-cache/gitlab.example.com-8443/sub/path/42", nil},
		{"/vk/", "https://gitlab.com", 7, "vk/ci-cache/gitlab.com/7", nil},
		{"", "https://user:pw@gitlab.example.com/My__Odd~Path?x=1#f", 3, "ci-cache/gitlab.example.com/my_odd-path/3", nil},
		{"", "http://[::1]:8080", 5, "ci-cache/1-8080/5", nil},
		{"", "not a url", 1, "", ErrBadRepository},
		{"Bad Prefix", "https://gitlab.com", 1, "", ErrBadRepository},
	}
	for _, tc := range tests {
		got, err := Repository(tc.prefix, tc.url, tc.id)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("Repository(%q, %q, %d) = %q, %v; want %q, %v", tc.prefix, tc.url, tc.id, got, err, tc.want, tc.err)
		}
	}
}

var tagRE = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)

// spec: XFER-08
func TestTagSeparatesProtection(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k1 := rapid.String().Draw(t, "k1")
		k2 := rapid.String().Draw(t, "k2")
		p, u := Tag(k1, true), Tag(k1, false)
		if p == u {
			t.Fatalf("protected and unprotected share tag %q", p)
		}
		for _, tag := range []string{p, u, KeyDigest(k1)} {
			if !tagRE.MatchString(tag) {
				t.Fatalf("tag %q is not a valid OCI tag", tag)
			}
		}
		if (Tag(k1, true) == Tag(k2, true)) != (k1 == k2) {
			t.Fatalf("tags of %q and %q collide or differ wrongly", k1, k2)
		}
	})
}

// spec: XFER-07
func TestRepositoryAlwaysValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		host := rapid.StringMatching(`[A-Za-z0-9.-]{1,20}(:[0-9]{1,5})?`).Draw(t, "host")
		path := rapid.StringMatching(`(/[A-Za-z0-9._~-]{0,10}){0,3}`).Draw(t, "path")
		id := rapid.Int64Range(1, 1<<40).Draw(t, "id")
		repo, err := Repository("", "https://"+host+path, id)
		if err != nil {
			return // hosts that sanitize to nothing are refused, not mangled
		}
		if err := ValidRepository(repo); err != nil {
			t.Fatalf("Repository gave invalid %q", repo)
		}
	})
}
