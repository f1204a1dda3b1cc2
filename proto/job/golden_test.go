package job

import (
	"testing"

	"github.com/vk-ci/vk/proto/internal/golden"
)

func check[T any](t *testing.T, name string, v T) {
	t.Helper()
	enc, dec := golden.JSON[T]()
	golden.Check(t, name, v, enc, dec)
}

// TestGoldenSpec pins the job spec's encoding: the union tagged by kind with
// its gitlab_ci payload and every translated field.
//
// spec: PROTO-01, PROTO-12, SPEC-03, SPEC-04, SPEC-07, SPEC-08, SPEC-09, SPEC-11, SPEC-12, SPEC-13, SPEC-14, SPEC-15, SPEC-16, SPEC-17, SPEC-18, SPEC-19, SPEC-21, SPEC-24, SPEC-25
func TestGoldenSpec(t *testing.T) {
	t.Run("full", func(t *testing.T) { check(t, "spec_full", NewGitLabCI(fullJob())) })
	t.Run("minimal", func(t *testing.T) { check(t, "spec_minimal", NewGitLabCI(minimalJob())) })
	t.Run("unknown_kind", func(t *testing.T) { check(t, "spec_unknown_kind", JobSpec{Kind: "nomad_batch"}) })
	t.Run("redacted", func(t *testing.T) { check(t, "spec_full_redacted", NewGitLabCI(fullJob()).Redacted()) })
}

// TestGoldenParts pins each part of a CiJob in its own file, so a change
// to one type shows in one small diff.
//
// spec: PROTO-01, SPEC-11, SPEC-12, SPEC-13, SPEC-15, SPEC-16, SPEC-17, SPEC-18, SPEC-19, SPEC-21
func TestGoldenParts(t *testing.T) {
	j := fullJob()
	check(t, "job_info", j.Job)
	check(t, "sources", j.Sources)
	check(t, "variable", j.Variables[2])
	check(t, "step", j.Steps[1])
	check(t, "image", *j.Image)
	check(t, "service", j.Services[0])
	check(t, "port", j.Services[0].Ports[0])
	check(t, "artifact", j.Artifacts[0])
	check(t, "cache", j.Caches[0])
	check(t, "registry_credential", j.RegistryCredentials[0])
	check(t, "dependency", j.Dependencies[0])
	check(t, "artifacts_file", *j.Dependencies[0].ArtifactsFile)
	check(t, "trace_settings", j.Trace)
	check(t, "hook", j.Hooks[0])
	check(t, "cijob", *j)
}
