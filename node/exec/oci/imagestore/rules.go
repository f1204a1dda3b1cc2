package imagestore

import (
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Rules are the node's image rules (STAGE-08): where an image name without
// a registry is looked up, and which mirrors are tried first. The zero
// value resolves names as Docker does (Docker Hub, "library/" for single
// names) over HTTPS.
type Rules struct {
	// Registry is the registry host[:port] for names that do not name one
	// (e.g. "ruby:3.3"); "" means Docker Hub (index.docker.io).
	Registry string
	// Prefix is a repository prefix put before names that do not name a
	// registry, e.g. "dockerhub-proxy" turns "ruby:3.3" into
	// "<Registry>/dockerhub-proxy/ruby:3.3". "" means none. Names that
	// name their registry are never prefixed.
	Prefix string
	// Mirrors maps a registry host[:port] (as resolved, e.g.
	// "index.docker.io") to mirror hosts tried in order before it. A
	// mirror serves the same repository paths. The job's registry
	// credentials are never sent to a mirror unless they name the mirror.
	Mirrors map[string][]string
	// PlainHTTP lists registry hosts[:port] (origins or mirrors) spoken to
	// over plain HTTP instead of HTTPS, e.g. a loopback test registry.
	PlainHTTP []string
}

// Ref is an image name resolved under [Rules].
type Ref struct {
	// Registry is the origin registry host[:port].
	Registry string
	// Repository is the repository path on it, e.g. "library/ruby".
	Repository string
	// Tag is the tag; "" when Digest is set.
	Tag string
	// Digest pins the manifest, e.g. "sha256:…"; "" for a tag.
	Digest string
}

// String is the canonical reference, registry/repository:tag or
// registry/repository@digest.
func (r Ref) String() string {
	if r.Digest != "" {
		return r.Registry + "/" + r.Repository + "@" + r.Digest
	}
	return r.Registry + "/" + r.Repository + ":" + r.Tag
}

// namesRegistry reports whether an image name's first component is a
// registry host, as Docker decides it: it has a dot or a port, or is
// "localhost".
func namesRegistry(s string) bool {
	first, _, ok := strings.Cut(s, "/")
	if !ok {
		return false
	}
	return strings.ContainsAny(first, ".:") || first == "localhost"
}

// Resolve resolves an image name, as a job gives it, under the rules. An
// error wraps [ErrBadName].
func (rules Rules) Resolve(image string) (Ref, error) {
	s := strings.TrimSpace(image)
	if s == "" {
		return Ref{}, fmt.Errorf("%w: empty image name", ErrBadName)
	}
	if !namesRegistry(s) {
		if p := strings.Trim(rules.Prefix, "/"); p != "" {
			s = p + "/" + s
		}
		if rules.Registry != "" {
			s = rules.Registry + "/" + s
		}
	}
	ref, err := name.ParseReference(s, name.StrictValidation)
	if err != nil {
		// StrictValidation refuses an implicit tag; try again allowing it.
		ref, err = name.ParseReference(s)
	}
	if err != nil {
		return Ref{}, fmt.Errorf("%w: %q: %w", ErrBadName, image, err)
	}
	out := Ref{Registry: ref.Context().RegistryStr(), Repository: ref.Context().RepositoryStr()}
	switch r := ref.(type) {
	case name.Digest:
		out.Digest = r.DigestStr()
	case name.Tag:
		out.Tag = r.TagStr()
	}
	return out, nil
}

// hosts lists the hosts to try for ref: its mirrors in order, then its
// registry.
func (rules Rules) hosts(ref Ref) []string {
	return append(slices.Clone(rules.Mirrors[ref.Registry]), ref.Registry)
}

func (rules Rules) plainHTTP(host string) bool { return slices.Contains(rules.PlainHTTP, host) }

// Platform is an image platform (SPEC-14): os/architecture[/variant].
type Platform struct {
	// OS is e.g. "linux"; Architecture e.g. "amd64", "arm64" (normalised);
	// Variant e.g. "v8", "" when none was given.
	OS, Architecture, Variant string
}

// String is os/arch[/variant].
func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// HostPlatform is the platform the node runs.
func HostPlatform() Platform { return Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH} }

var knownOS = []string{"linux", "windows", "darwin", "freebsd"}

// ParsePlatform reads a platform as executor_opts.docker.platform gives it:
// "os/arch[/variant]" or "arch[/variant]" (os linux). "" means the host's.
// Architecture aliases (aarch64, x86_64) are normalised.
func ParsePlatform(s string) (Platform, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return HostPlatform(), nil
	}
	parts := strings.Split(s, "/")
	p := Platform{OS: "linux"}
	if slices.Contains(knownOS, parts[0]) {
		p.OS = parts[0]
		parts = parts[1:]
	}
	if len(parts) == 0 || len(parts) > 2 || parts[0] == "" {
		return Platform{}, fmt.Errorf("%w: platform %q", ErrBadName, s)
	}
	p.Architecture = parts[0]
	if len(parts) == 2 {
		p.Variant = parts[1]
	}
	switch p.Architecture {
	case "aarch64":
		p.Architecture = "arm64"
	case "x86_64", "x86-64":
		p.Architecture = "amd64"
	}
	return p, nil
}

// matches reports whether an image of platform q serves a request for p.
// arm64's variant v8 is its default, so "" and "v8" match.
func (p Platform) matches(q Platform) bool {
	if p.OS != q.OS || p.Architecture != q.Architecture {
		return false
	}
	if p.Variant == "" {
		return true
	}
	norm := func(v string) string {
		if v == "" && p.Architecture == "arm64" {
			return "v8"
		}
		return v
	}
	return norm(p.Variant) == norm(q.Variant)
}
