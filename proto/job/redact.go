package job

import (
	"net/url"
	"reflect"
	"slices"
	"strings"
)

// Redacted returns a deep copy of j with every secret removed, for records,
// audit logs and debugging output (AUTH-07). Removed (set to ""): the job
// token, every dependency token, every registry credential password, and
// the value of every secret variable ([Variable.Secret]: all but public
// ones; job, image and service variables alike, CI_REPOSITORY_URL with its
// job token included). Any user info left in the repository URL is
// dropped. Then every string left in the copy is searched, and what it
// holds of a secret is replaced by [RedactedMark]:
//
//   - of a credential (the job token, dependency tokens, registry
//     passwords, the repository URL's password, the values of masked and
//     file variables): any run of at least [MinHuntedSecret] bytes taken
//     from it, so a token inside a URL, a script line or a public variable
//     does not survive, whole or in part;
//   - of a variable that is merely not public: its whole value. Its parts
//     are ordinary text (CI_REPOSITORY_URL's host and path are the public
//     repository URL); the token inside it is a credential and hunted as
//     one.
//
// Values shorter than MinHuntedSecret bytes are blanked in their own field
// but not hunted elsewhere: such short text ("1", "true") cannot be told
// from ordinary words, and GitLab refuses to mask values that short.
// Everything else, including server_ca_pem, is kept. The copy shares no
// memory with j.
//
// A redacted spec is not runnable: the node needs the secrets.
func (j *CiJob) Redacted() CiJob {
	out := j.clone()
	creds, private := j.secrets()
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
	if h := newHunter(creds, private); h != nil {
		h.walk(reflect.ValueOf(&out).Elem())
	}
	return out
}

// MinHuntedSecret is the shortest run of a secret's bytes that [CiJob.Redacted]
// finds and replaces wherever it appears in the spec (GitLab's own minimum
// length of a masked value).
const MinHuntedSecret = 8

// RedactedMark replaces a secret found inside another string.
const RedactedMark = "[REDACTED]"

// secrets lists j's secret values: creds are the credentials (the job
// token, dependency tokens, registry passwords, the repository URL's
// password and the values of masked or file variables), private the values
// of the other secret variables (not public, nor masked, nor file).
func (j *CiJob) secrets() (creds, private []string) {
	creds = []string{j.Token}
	vars := func(vs []Variable) {
		for _, v := range vs {
			switch {
			case v.Masked || v.File:
				creds = append(creds, v.Value)
			case v.Secret():
				private = append(private, v.Value)
			}
		}
	}
	vars(j.Variables)
	if j.Image != nil {
		vars(j.Image.Variables)
	}
	for _, s := range j.Services {
		vars(s.Variables)
	}
	for _, c := range j.RegistryCredentials {
		creds = append(creds, c.Password)
	}
	for _, d := range j.Dependencies {
		creds = append(creds, d.Token)
	}
	if u, err := url.Parse(j.Sources.RepoURL); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			creds = append(creds, p)
		}
	}
	return creds, private
}

// redactVariables blanks the value of every secret variable.
func redactVariables(vs []Variable) {
	for i := range vs {
		if vs[i].Secret() {
			vs[i].Value = ""
		}
	}
}

// hunter finds secret bytes inside strings. Every window of
// MinHuntedSecret bytes of every credential is indexed, and a string
// position where one starts is covered for that many bytes; any longer
// shared run is a chain of such windows, so it is covered whole. Each whole
// private value is covered wherever it occurs.
type hunter struct {
	windows map[string]struct{}
	whole   []string
}

func newHunter(creds, private []string) *hunter {
	h := &hunter{windows: map[string]struct{}{}}
	for _, s := range creds {
		for i := 0; i+MinHuntedSecret <= len(s); i++ {
			h.windows[s[i:i+MinHuntedSecret]] = struct{}{}
		}
	}
	for _, s := range private {
		if len(s) >= MinHuntedSecret {
			h.whole = append(h.whole, s)
		}
	}
	if len(h.windows) == 0 && len(h.whole) == 0 {
		return nil
	}
	return h
}

// scrub returns s with every covered run replaced by RedactedMark. When
// the mark itself would complete a secret (one containing the mark's
// bytes), covered runs are deleted instead; deleting can join two
// neighbours into a new secret, so it repeats until none is left.
func (h *hunter) scrub(s string) string {
	if len(s) < MinHuntedSecret {
		return s
	}
	r := h.replace(s, RedactedMark)
	if !h.found(r) {
		return r
	}
	for h.found(s) {
		s = h.replace(s, "")
	}
	return s
}

func (h *hunter) found(s string) bool {
	return h.cover(s) != nil
}

// cover marks the bytes of s that belong to a secret; nil when none do.
func (h *hunter) cover(s string) []bool {
	var cover []bool
	mark := func(from, n int) {
		if cover == nil {
			cover = make([]bool, len(s))
		}
		for k := from; k < from+n; k++ {
			cover[k] = true
		}
	}
	if len(h.windows) > 0 {
		for i := 0; i+MinHuntedSecret <= len(s); i++ {
			if _, ok := h.windows[s[i:i+MinHuntedSecret]]; ok {
				mark(i, MinHuntedSecret)
			}
		}
	}
	for _, w := range h.whole {
		for off := 0; ; {
			k := strings.Index(s[off:], w)
			if k < 0 {
				break
			}
			mark(off+k, len(w))
			off += k + 1
		}
	}
	return cover
}

func (h *hunter) replace(s, mark string) string {
	cover := h.cover(s)
	if cover == nil {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if !cover[i] {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(mark)
		for i < len(s) && cover[i] {
			i++
		}
	}
	return b.String()
}

// walk scrubs every string reachable from v (which must be settable):
// fields added to the spec later are covered without a change here.
func (h *hunter) walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); len(s) >= MinHuntedSecret {
			if r := h.scrub(s); r != s {
				v.SetString(r)
			}
		}
	case reflect.Pointer:
		if !v.IsNil() {
			h.walk(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			h.walk(v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				h.walk(v.Field(i))
			}
		}
	case reflect.Map:
		panic("job: Redacted cannot scrub a map; extend hunter.walk")
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
