package job

import (
	"net/url"
	"slices"
)

// Redacted returns a deep copy of j with every secret removed, for records,
// audit logs and debugging output (AUTH-07). Removed (set to ""): the job
// token, every dependency token, every registry credential password, the
// values of masked and file variables (job and service variables alike),
// and any user info left in the repository URL. Everything else, including
// server_ca_pem, is kept. The copy shares no memory with j.
//
// A redacted spec is not runnable: the node needs the secrets.
func (j *CiJob) Redacted() CiJob {
	out := j.clone()
	out.Token = ""
	out.Sources.RepoURL = stripUserinfo(out.Sources.RepoURL)
	redactVariables(out.Variables)
	if out.Image != nil {
		redactVariables(out.Image.Variables)
	}
	for i := range out.Services {
		redactVariables(out.Services[i].Variables)
	}
	for i := range out.RegistryCredentials {
		out.RegistryCredentials[i].Password = ""
	}
	for i := range out.Dependencies {
		out.Dependencies[i].Token = ""
	}
	return out
}

func redactVariables(vs []Variable) {
	for i := range vs {
		if vs[i].Secret() {
			vs[i].Value = ""
		}
	}
}

// stripUserinfo removes credentials from a URL. A string that does not
// parse as a URL becomes "": a malformed URL must not smuggle a token into
// a record either.
func stripUserinfo(s string) string {
	u, err := url.Parse(s)
	if err == nil {
		if u.User == nil {
			return s
		}
		u.User = nil
		return u.String()
	}
	return "" // unparseable: keep nothing rather than risk a token
}

// clone returns a deep copy of j.
func (j *CiJob) clone() CiJob {
	out := *j
	out.Sources.Refspecs = slices.Clone(j.Sources.Refspecs)
	if j.Sources.Protected != nil {
		p := *j.Sources.Protected
		out.Sources.Protected = &p
	}
	out.Variables = slices.Clone(j.Variables)
	out.Steps = cloneEach(j.Steps, func(s Step) Step {
		s.Script = slices.Clone(s.Script)
		return s
	})
	if j.Image != nil {
		im := j.Image.clone()
		out.Image = &im
	}
	out.Services = cloneEach(j.Services, Image.clone)
	out.Artifacts = cloneEach(j.Artifacts, func(a Artifact) Artifact {
		a.Paths = slices.Clone(a.Paths)
		a.Exclude = slices.Clone(a.Exclude)
		return a
	})
	out.Caches = cloneEach(j.Caches, func(c Cache) Cache {
		c.Paths = slices.Clone(c.Paths)
		c.FallbackKeys = slices.Clone(c.FallbackKeys)
		return c
	})
	out.RegistryCredentials = slices.Clone(j.RegistryCredentials)
	out.Dependencies = cloneEach(j.Dependencies, func(d Dependency) Dependency {
		if d.ArtifactsFile != nil {
			f := *d.ArtifactsFile
			d.ArtifactsFile = &f
		}
		return d
	})
	out.Trace.TokenMaskPrefixes = slices.Clone(j.Trace.TokenMaskPrefixes)
	out.Hooks = cloneEach(j.Hooks, func(h Hook) Hook {
		h.Script = slices.Clone(h.Script)
		return h
	})
	out.Notices = slices.Clone(j.Notices)
	return out
}

func (im Image) clone() Image {
	im.Command = slices.Clone(im.Command)
	im.Entrypoint = slices.Clone(im.Entrypoint)
	im.Ports = slices.Clone(im.Ports)
	im.Variables = slices.Clone(im.Variables)
	im.PullPolicy = slices.Clone(im.PullPolicy)
	return im
}

func cloneEach[T any](s []T, f func(T) T) []T {
	if s == nil {
		return nil
	}
	out := make([]T, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}
