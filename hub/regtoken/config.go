package regtoken

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/cacherepo"
)

// Defaults of [Config] (docs/hub.md, docs/defaults.md).
const (
	// DefaultJobTimeout is the timeout assumed for a job whose spec
	// names none: GitLab's own default job timeout, one hour.
	DefaultJobTimeout = time.Hour
	// LifetimeMargin is added to a job's timeout for its token's
	// lifetime: the time from the start to the first step, and the last
	// archive_cache's transfers (one CACHE_REQUEST_TIMEOUT of 10 minutes
	// by default), both of which fall outside the job's timeout.
	LifetimeMargin = 15 * time.Minute
	// MaxLifetime caps a token's lifetime when token_lifetime_secs is
	// unset: a job with a week's timeout still gets a token that dies
	// within a day if it leaks.
	MaxLifetime = 24 * time.Hour
)

// ErrConfig is wrapped by every error [Config.Validate] and [New] return.
var ErrConfig = errors.New("regtoken: invalid registry")

// Config is one registry the hub mints job registry tokens for: one
// element of hub.toml's [[registries]] array.
type Config struct {
	// URL is the registry's base URL exactly as nodes report it in their
	// inventory (the node's [registry] url, XFER-17), e.g.
	// "https://registry.example.com". Matched after lower-casing the
	// scheme and host and dropping a trailing "/". Required.
	URL string `toml:"url"`
	// Service is the registry's auth.token.service: the tokens' audience
	// ("aud"). Required.
	Service string `toml:"service"`
	// Issuer is the registry's auth.token.issuer: the tokens' "iss".
	// Required.
	Issuer string `toml:"issuer"`
	// KeyFile is the PEM file of the signing key (ECDSA P-256, P-384 or
	// P-521, or RSA of at least 2048 bits; PKCS #8, SEC 1 or PKCS #1).
	// Required. Read at start; a secret, never logged.
	KeyFile string `toml:"key_file"`
	// CertFile is the PEM file of the signing key's certificate, first,
	// then any intermediates up to what the registry's
	// auth.token.rootcertbundle trusts; the chain goes in every token's
	// "x5c" header. Required.
	CertFile string `toml:"cert_file"`
	// RepositoryPrefix is put before "ci-cache/…" in the repositories
	// the tokens grant, e.g. "tenants/acme"; empty means none. The
	// repository is absolute on the registry: the nodes' own [registry]
	// repository_prefix does not apply to it (XFER-13).
	RepositoryPrefix string `toml:"repository_prefix"`
	// TokenLifetimeSecs, when set, is every token's lifetime in seconds.
	// 0 (the default) means the job's timeout plus 15 minutes, at most
	// 24 hours (a job without a timeout counts one hour).
	TokenLifetimeSecs int `toml:"token_lifetime_secs"`
}

// Validate lists every problem of the i-th registry (pure: the files are
// read by [New]), each naming its key as registries[i].<key> and
// wrapping [ErrConfig].
func (c Config) Validate(i int) error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: registries[%d].%s: %s", ErrConfig, i, key, fmt.Sprintf(format, a...)))
	}
	if _, err := normalURL(c.URL); err != nil {
		bad("url", "%v", err)
	}
	for key, v := range map[string]string{"service": c.Service, "issuer": c.Issuer, "key_file": c.KeyFile, "cert_file": c.CertFile} {
		if strings.TrimSpace(v) == "" {
			bad(key, "is required")
		}
	}
	if p := strings.Trim(c.RepositoryPrefix, "/"); p != "" {
		if err := cacherepo.Valid(p); err != nil {
			bad("repository_prefix", "%q is not a repository path (lower-case letters, digits and separators, components joined by /)", c.RepositoryPrefix)
		}
	}
	if c.TokenLifetimeSecs < 0 || c.TokenLifetimeSecs > int(MaxLifetime/time.Second)*7 {
		bad("token_lifetime_secs", "%d: want 0 (the job's timeout plus a margin) or 1..%d", c.TokenLifetimeSecs, int(MaxLifetime/time.Second)*7)
	}
	return errors.Join(errs...)
}

// Lifetime is the lifetime of a token for a job whose timeout is
// jobTimeout (0: unknown).
func (c Config) Lifetime(jobTimeout time.Duration) time.Duration {
	if c.TokenLifetimeSecs > 0 {
		return time.Duration(c.TokenLifetimeSecs) * time.Second
	}
	if jobTimeout <= 0 {
		jobTimeout = DefaultJobTimeout
	}
	return min(jobTimeout+LifetimeMargin, MaxLifetime)
}

// normalURL is a registry base URL as the hub compares it: scheme and
// host lower-cased, no trailing "/", no user info, query or fragment.
func normalURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http(s) URL with a host", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: want scheme://host[:port][/path] only", raw)
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + strings.TrimRight(u.Path, "/"), nil
}
