package cacherepo

import (
	"errors"
	"testing"
)

// A job's own repository names the protection of its ref, so a protected
// and an unprotected job of one project never share a cache repository.
//
// spec: XFER-13
func TestJobRepository(t *testing.T) {
	for _, tc := range []struct {
		prefix, url string
		id          int64
		protected   bool
		want        string
		err         error
	}{
		{"", "https://gitlab.com", 1, true, "ci-cache/gitlab.com/1/protected", nil},
		{"", "https://gitlab.com", 1, false, "ci-cache/gitlab.com/1/unprotected", nil},
		{"/tenants/acme/", "https://GitLab.example.com:8443/sub/", 42, false, "tenants/acme/ci-cache/gitlab.example.com-8443/sub/42/unprotected", nil},
		{"", "not a url", 1, true, "", ErrBadRepository},
	} {
		got, err := JobRepository(tc.prefix, tc.url, tc.id, tc.protected)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("JobRepository(%q, %q, %d, %v) = %q, %v; want %q, %v", tc.prefix, tc.url, tc.id, tc.protected, got, err, tc.want, tc.err)
		}
	}
}
