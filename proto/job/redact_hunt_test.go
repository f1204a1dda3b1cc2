package job

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// genHardSecret draws a secret of at least MinHuntedSecret bytes whose
// characters JSON escapes (quotes, angle brackets, ampersands, a non-ASCII
// letter), so the escaped form differs from the raw one. Plain strings of
// the generators never hold these characters nor upper-case letters.
var genHardSecret = rapid.StringMatching(`Z[A-Y"<>&é]{7,20}`)

// genLeakyJob draws a job whose secrets are also copied, whole or in part,
// into places that are not secret fields: the repository URL's user info,
// a public CI_REPOSITORY_URL-like variable, script lines, a cache key, the
// job's name. Redacted must find them there too.
var genLeakyJob = rapid.Custom(func(t *rapid.T) *CiJob {
	j := genCiJob.Draw(t, "base")
	j.Token = genHardSecret.Draw(t, "token")
	secrets := []string{j.Token}
	for i := range j.Variables {
		if j.Variables[i].Secret() {
			j.Variables[i].Value = genHardSecret.Draw(t, "var")
			secrets = append(secrets, j.Variables[i].Value)
		}
	}
	for i := range j.RegistryCredentials {
		j.RegistryCredentials[i].Password = genHardSecret.Draw(t, "pw")
		secrets = append(secrets, j.RegistryCredentials[i].Password)
	}
	for i := range j.Dependencies {
		j.Dependencies[i].Token = genHardSecret.Draw(t, "dep")
		secrets = append(secrets, j.Dependencies[i].Token)
	}
	// A part of at least MinHuntedSecret bytes of some secret, or the whole.
	part := func(label string) string {
		s := rapid.SampledFrom(secrets).Draw(t, label)
		from := rapid.IntRange(0, len(s)-MinHuntedSecret).Draw(t, label+"_from")
		to := rapid.IntRange(from+MinHuntedSecret, len(s)).Draw(t, label+"_to")
		return s[from:to]
	}
	j.Sources.RepoURL = "https://gitlab-ci-token:" + j.Token + "@gitlab.example.com/a/b.git"
	j.Variables = append(j.Variables, Variable{Key: "CI_REPOSITORY_URL", Value: j.Sources.RepoURL},
		Variable{Key: "LEAK", Value: "x" + part("pubvar") + "y", Public: true})
	j.Steps = append(j.Steps, Step{Name: "script", Script: []string{"echo " + part("script"), part("s1") + part("s2")}})
	j.Caches = append(j.Caches, Cache{Key: "k-" + part("cache")})
	j.Job.Name = part("name")
	return j
})

// jsonEscaped is s as it appears inside a JSON string.
func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// base64Forms is s's base64 encoding at each of the three alignments it
// can have inside a longer encoded byte string, cut to the characters that
// depend on s alone.
func base64Forms(s string) []string {
	var out []string
	for i := 0; i < 3; i++ {
		enc := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", i) + s))
		g, e := (i+2)/3, (i+len(s))/3
		if e > g {
			out = append(out, enc[g*4:e*4])
		}
	}
	return out
}

// TestRedactedHuntsSecretsEverywhere: whatever the job and wherever its
// secrets were copied, no credential nor any run of MinHuntedSecret bytes
// of one, and no private variable's whole value, appears in the redacted spec's JSON encoding, raw or JSON-escaped,
// nor in the base64 of that encoding (which is how records hold specs).
//
// spec: AUTH-03, AUTH-04, AUTH-05, AUTH-07
func TestRedactedHuntsSecretsEverywhere(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		j := genLeakyJob.Draw(t, "job")
		r := j.Redacted()
		enc, err := json.Marshal(NewGitLabCI(&r))
		if err != nil {
			t.Fatal(err)
		}
		b64 := base64.StdEncoding.EncodeToString(enc)
		creds, private := j.secrets()
		for _, s := range private {
			if len(s) >= MinHuntedSecret && strings.Contains(string(enc), s) {
				t.Fatalf("private value %q survived redaction: %s", s, enc)
			}
		}
		for _, s := range creds {
			if len(s) < MinHuntedSecret {
				continue
			}
			for i := 0; i+MinHuntedSecret <= len(s); i++ {
				w := s[i : i+MinHuntedSecret]
				if strings.Contains(string(enc), w) || strings.Contains(string(enc), jsonEscaped(w)) {
					t.Fatalf("%q (part of secret %q) survived redaction: %s", w, s, enc)
				}
			}
			for _, f := range base64Forms(s) {
				if strings.Contains(b64, f) {
					t.Fatalf("secret %q survived in base64 as %q", s, f)
				}
			}
		}
		if !strings.Contains(string(enc), `"LEAK"`) || !strings.Contains(string(enc), `"server_url":"https://gitlab.example.com"`) {
			t.Fatalf("redaction removed more than secrets: %s", enc)
		}
	})
}

// TestRedactedRepositoryURL: GitLab's CI_REPOSITORY_URL carries the job
// token in its user info and is neither public nor masked; neither the
// variable nor the repository URL keeps the token.
//
// spec: AUTH-03, AUTH-07
func TestRedactedRepositoryURL(t *testing.T) {
	const tok = "glcbt-64_abcdefghijklmnop"
	u := "https://gitlab-ci-token:" + tok + "@gitlab.example.com/acme/web.git"
	j := &CiJob{Token: tok, Sources: Sources{RepoURL: u},
		Variables: []Variable{
			{Key: "CI_REPOSITORY_URL", Value: u},
			{Key: "PRIVATE", Value: "not-public-nor-masked"},
			{Key: "CI_PROJECT_URL", Value: "https://gitlab.example.com/acme/web", Public: true},
			{Key: "ECHO", Value: "clone " + u, Public: true},
			{Key: "MIRROR", Value: "https://gitlab-ci-token:" + tok + "@mirror.example.com/x.git", Public: true},
		}}
	r := j.Redacted()
	enc, _ := json.Marshal(r)
	for _, bad := range []string{tok, "not-public-nor-masked"} {
		if strings.Contains(string(enc), bad) {
			t.Errorf("redacted spec holds %q: %s", bad, enc)
		}
	}
	if r.Variables[0].Value != "" || r.Variables[1].Value != "" {
		t.Errorf("private variables kept: %+v", r.Variables[:2])
	}
	if got := r.Variables[2].Value; got != "https://gitlab.example.com/acme/web" {
		t.Errorf("public variable changed to %q", got)
	}
	// The whole private value is found in the public one.
	if got, want := r.Variables[3].Value, "clone "+RedactedMark; got != want {
		t.Errorf("public copy of the URL = %q, want %q", got, want)
	}
	if got, want := r.Variables[4].Value, "https://gitlab-ci-token:"+RedactedMark+"@mirror.example.com/x.git"; got != want {
		t.Errorf("public URL holding the token = %q, want %q", got, want)
	}
	if r.Sources.RepoURL != "https://gitlab.example.com/acme/web.git" {
		t.Errorf("RepoURL = %q", r.Sources.RepoURL)
	}
}

// TestScrubMarkInsideSecret: a secret holding the mark's own bytes is
// deleted rather than replaced, so the mark cannot complete it.
func TestScrubMarkInsideSecret(t *testing.T) {
	h := newHunter([]string{"[REDACTED]", "abcdefgh"}, []string{"private[REDACTED]"})
	for _, in := range []string{"x[REDACTED]y", "abcdabcdefghefgh", "[REDA" + "abcdefgh" + "CTED]", "private[REDA" + "abcdefgh" + "CTED]"} {
		out := h.scrub(in)
		if h.found(out) {
			t.Errorf("scrub(%q) = %q still holds a secret", in, out)
		}
	}
}
