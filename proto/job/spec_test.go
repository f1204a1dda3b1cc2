package job

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/internal/deptest"
	"pgregory.net/rapid"
)

// TestDeps fences proto/job to the standard library.
//
// spec: PROTO-01
func TestDeps(t *testing.T) {
	deptest.StdlibOnly(t, "github.com/vk-ci/vk/proto/job")
}

// TestValidate checks the union's shape and the payload's required fields
// (a job without a project is invalid, API-46).
//
// spec: PROTO-12, API-46
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   JobSpec
		want error
	}{
		{"gitlab_ci", NewGitLabCI(minimalJob()), nil},
		{"no payload", JobSpec{Kind: KindGitLabCI}, ErrInvalid},
		{"no kind", JobSpec{GitLabCI: minimalJob()}, ErrUnknownKind},
		{"unknown kind", JobSpec{Kind: "other_ci"}, ErrUnknownKind},
		{"full", NewGitLabCI(fullJob()), nil},
		{"no project", NewGitLabCI(func() *CiJob { j := minimalJob(); j.Job.ProjectID = 0; return j }()), ErrInvalid},
		{"no token", NewGitLabCI(func() *CiJob { j := minimalJob(); j.Token = ""; return j }()), ErrInvalid},
		{"no timeout", NewGitLabCI(func() *CiJob { j := minimalJob(); j.TimeoutSecs = 0; return j }()), ErrInvalid},
		{"no trace limit", NewGitLabCI(func() *CiJob { j := minimalJob(); j.Trace.LimitBytes = 0; return j }()), ErrInvalid},
		{"no repo", NewGitLabCI(func() *CiJob { j := minimalJob(); j.Sources.RepoURL = ""; return j }()), ErrInvalid},
		{"no server", NewGitLabCI(func() *CiJob { j := minimalJob(); j.ServerURL = ""; return j }()), ErrInvalid},
		{"no job id", NewGitLabCI(func() *CiJob { j := minimalJob(); j.Job.ID = 0; return j }()), ErrInvalid},
		{"unnamed variable", NewGitLabCI(func() *CiJob { j := minimalJob(); j.Variables = []Variable{{Value: "x"}}; return j }()), ErrInvalid},
		{"unnamed step", NewGitLabCI(func() *CiJob { j := minimalJob(); j.Steps = []Step{{}}; return j }()), ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.in.Validate()
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("Validate() = %v, want %v", err, tc.want)
			}
		})
	}
	if !KindGitLabCI.Known() || Kind("x").Known() {
		t.Error("Kind.Known wrong")
	}
}

// TestUnknownKindDecodes: a spec of a kind this version does not know
// decodes without error and keeps its kind, so the hub can refuse it.
//
// spec: PROTO-12
func TestUnknownKindDecodes(t *testing.T) {
	var s JobSpec
	if err := json.Unmarshal([]byte(`{"kind":"future_ci","future_ci":{"x":1}}`), &s); err != nil {
		t.Fatal(err)
	}
	if s.Kind != "future_ci" || s.GitLabCI != nil || !errors.Is(s.Validate(), ErrUnknownKind) {
		t.Errorf("decoded %+v, Validate %v", s, s.Validate())
	}
}

// specOfSize returns a spec whose compact encoding is exactly n bytes.
func specOfSize(t *testing.T, n int) JobSpec {
	t.Helper()
	j := minimalJob()
	j.Variables = []Variable{{Key: "PAD", Value: ""}}
	s := NewGitLabCI(j)
	base, err := s.Size()
	if err != nil {
		t.Fatal(err)
	}
	j.Variables[0].Value = strings.Repeat("x", n-base)
	if got, _ := s.Size(); got != n {
		t.Fatalf("built spec of %d bytes, want %d", got, n)
	}
	return s
}

// TestCheckSize: 512 KiB serialized is accepted, one byte more refused.
//
// spec: API-35
func TestCheckSize(t *testing.T) {
	if err := specOfSize(t, MaxSpecBytes).CheckSize(); err != nil {
		t.Errorf("CheckSize at the limit = %v, want nil", err)
	}
	if err := specOfSize(t, MaxSpecBytes+1).CheckSize(); !errors.Is(err, ErrTooLarge) {
		t.Errorf("CheckSize past the limit = %v, want ErrTooLarge", err)
	}
	if MaxSpecBytes != 512*1024 {
		t.Errorf("MaxSpecBytes = %d", MaxSpecBytes)
	}
}

// TestTimestamps: FF_TIMESTAMPS from the job's variables only, on by
// default, last occurrence wins.
//
// spec: TRACE-03
func TestTimestamps(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars []Variable
		want bool
	}{
		{"unset", nil, true},
		{"false", []Variable{{Key: "FF_TIMESTAMPS", Value: "false"}}, false},
		{"FALSE", []Variable{{Key: "FF_TIMESTAMPS", Value: " FALSE "}}, false},
		{"0", []Variable{{Key: "FF_TIMESTAMPS", Value: "0"}}, false},
		{"true", []Variable{{Key: "FF_TIMESTAMPS", Value: "true"}}, true},
		{"garbage keeps default", []Variable{{Key: "FF_TIMESTAMPS", Value: "nope"}}, true},
		{"last wins", []Variable{{Key: "FF_TIMESTAMPS", Value: "false"}, {Key: "FF_TIMESTAMPS", Value: "1"}}, true},
		{"last wins off", []Variable{{Key: "FF_TIMESTAMPS", Value: "1"}, {Key: "FF_TIMESTAMPS", Value: "false"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := minimalJob()
			j.Variables = tc.vars
			if got := j.Timestamps(); got != tc.want {
				t.Errorf("Timestamps() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRoundTrip: any CiJob survives encode → decode unchanged.
//
// spec: PROTO-01, PROTO-12
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := NewGitLabCI(genCiJob.Draw(t, "job"))
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back JobSpec
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(s, back); d != "" {
			t.Fatalf("round trip (-want +got):\n%s", d)
		}
	})
}

func TestEnviron(t *testing.T) {
	got := Environ([]Variable{{Key: "A", Value: "1"}, {Key: "B", Value: "x=y"}, {Key: "A", Value: "2"}})
	if want := []string{"A=1", "B=x=y", "A=2"}; !slices.Equal(got, want) {
		t.Errorf("Environ = %q, want %q", got, want)
	}
	if got := Environ(nil); got == nil || len(got) != 0 {
		t.Errorf("Environ(nil) = %#v, want an empty, non-nil environment", got)
	}
}
