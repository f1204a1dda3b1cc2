package store

import (
	"net/url"
	"strconv"
	"strings"
)

// InstanceKey returns the instance name of a GitLab server: the host (and
// port, if any) of its URL, lower-cased, e.g. "gitlab.example.com" for
// "https://GitLab.example.com/". It is the key of approvals, of job
// records' Instance and of the UI's project pages. A value that is
// already an instance name (no scheme) is returned lower-cased; one that
// is neither (unparseable, no host) gives "".
func InstanceKey(s string) string {
	if !strings.Contains(s, "://") {
		if ValidInstance(strings.ToLower(s)) {
			return strings.ToLower(s)
		}
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return ""
	}
	return strings.ToLower(u.Host)
}

// ValidInstance reports whether s has the shape of an instance name:
// host[:port] with no scheme, path, user, query or upper-case letters.
func ValidInstance(s string) bool {
	if s == "" || strings.ToLower(s) != s || strings.ContainsAny(s, "/?#@ \t") {
		return false
	}
	u, err := url.Parse("//" + s)
	if err != nil || u.Host != s || u.Hostname() == "" {
		return false
	}
	if port := u.Port(); port != "" {
		_, err := strconv.ParseUint(port, 10, 16)
		return err == nil
	}
	return !strings.HasSuffix(s, ":")
}
