package translate

import (
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"strings"

	"github.com/vk-ci/vk/internal/version"
	"github.com/vk-ci/vk/proto/job"
	"github.com/vk-ci/vk/relay/gitlab"
)

// DefaultTimeoutSecs is the job timeout when GitLab sends none (≤ 0), as
// gitlab-runner's default.
const DefaultTimeoutSecs = 7200

// Runner is what the relay knows about the runner a job came through.
type Runner struct {
	// ServerURL is the runner's configured GitLab URL (SPEC-25). Required.
	ServerURL string
	// RunnerID is the ID /runners/verify returned (SPEC-25); 0 when unknown.
	RunnerID int64
	// ShortToken is the runner token's short form ([gitlab.ShortToken]),
	// CI_RUNNER_SHORT_TOKEN. Never the token itself.
	ShortToken string
	// ServerCAPEM is the content of the runner's tls_ca_file (SPEC-24); ""
	// when none (see [ReadServerCA]).
	ServerCAPEM string
	// OutputLimit is the trace limit in bytes (the runner's output_limit);
	// 0 means job.DefaultTraceLimitBytes (4 MiB, TRACE-08).
	OutputLimit int64
	// Version, Revision and ExecutableArch are CI_RUNNER_VERSION,
	// CI_RUNNER_REVISION and CI_RUNNER_EXECUTABLE_ARCH; "" means vk-gitlab's
	// own (internal/version, "<GOOS>/<GOARCH>").
	Version, Revision, ExecutableArch string
}

// ReadServerCA reads a runner's tls_ca_file for Runner.ServerCAPEM; an
// empty file name gives "" (SPEC-24).
func ReadServerCA(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("translate: reading tls_ca_file: %w", err)
	}
	return string(b), nil
}

// Level is the kind of a trace line the relay writes for a job.
type Level int

// Line levels, styled as gitlab-runner's logger styles them.
const (
	// LevelInfo lines are green (Infoln).
	LevelInfo Level = iota
	// LevelWarning lines are yellow and start "WARNING: " (Warningln).
	LevelWarning
	// LevelNotice lines are plain, bold (Noticef / Println).
	LevelNotice
	// LevelError lines are red and start "ERROR: " (Errorln).
	LevelError
)

// Notice is a line for the job's trace that translation produced: the
// policy lines (SPEC-23), cache key warnings (SPEC-16) and dropped service
// aliases (DECISIONS 8). Text has no styling and no newline.
type Notice struct {
	// Level says how to style it.
	Level Level
	// Text is the message.
	Text string
}

// Result is a translated job.
type Result struct {
	// Job is the spec to submit.
	Job *job.CiJob
	// Notices are lines for the job's trace, in order, written before the
	// job's own output (gitlab-runner prints them at the build's start).
	Notices []Notice
}

// Translate turns GitLab's job response into the spec a node runs
// (SPEC-01..25), normalising it: defaults filled in (timeout 7200 s, step,
// artifact and cache when on_success, cache policy pull-push, trace limit),
// cache keys expanded against the job's and the runner's variables and
// sanitised as gitlab-runner does, service aliases split (the first kept),
// empty artifact formats set to zip, credentials stripped from the
// repository URL, the runner's own variables appended, registry
// credentials only of type registry, executor_opts docker.platform,
// docker.user and kubernetes.user honoured.
//
// Data that concerns only the relay's conversation with GitLab (queue
// metrics, runner uuid, features.failure_reasons, job inputs, tracing,
// suspend options) is left out (SPEC-02, 05, 06, 10).
//
// Jobs vk must not run are refused with a *[RefusalError] (errors.Is
// ErrRefused): secrets (SPEC-20) and run: steps (SPEC-22) as configuration
// failures, unknown executor_opts as gitlab-runner refuses them (system
// failure, exit code 3), an unparsable repository URL as a configuration
// failure, and a job lacking what the spec requires (job and project IDs,
// token, repository URL: [job.CiJob.Validate]) as a configuration failure.
// The relay fails such a job in GitLab with the error's reason.
func Translate(r *gitlab.JobResponse, rn Runner) (Result, error) {
	if r == nil {
		return Result{}, errors.New("translate: nil job response")
	}
	if err := refuse(r); err != nil {
		return Result{}, err
	}
	repoURL, err := gitlab.StripCredentials(r.GitInfo.RepoURL)
	if err != nil {
		return Result{}, &RefusalError{Failure: gitlab.FailureConfiguration, Message: "the job's repository URL is invalid", Err: err}
	}

	var res Result
	j := &job.CiJob{
		Job:         jobInfo(r, rn),
		Token:       r.Token,
		Sources:     sources(r, repoURL),
		TimeoutSecs: int64(r.RunnerInfo.Timeout),
		Trace: job.TraceSettings{
			Sections:          r.Features.TraceSections,
			TokenMaskPrefixes: cloneStrings(r.Features.TokenMaskPrefixes),
			LimitBytes:        rn.OutputLimit,
		},
		ServerURL:   rn.ServerURL,
		ServerCAPEM: rn.ServerCAPEM,
	}
	if j.TimeoutSecs <= 0 {
		j.TimeoutSecs = DefaultTimeoutSecs
	}
	if j.Trace.LimitBytes <= 0 {
		j.Trace.LimitBytes = job.DefaultTraceLimitBytes
	}
	res.Notices = append(res.Notices, policyNotices(r.PolicyOptions)...)

	j.Variables = append(variables(r.Variables), runnerVariables(rn)...)
	j.Steps = steps(r.Steps)
	if r.Image.Name != "" {
		img := image(r.Image)
		img.Alias = "" // the job image has no host name
		j.Image = &img
	}
	var notices []Notice
	j.Services, notices = services(r.Services)
	res.Notices = append(res.Notices, notices...)
	j.Artifacts = artifacts(r.Artifacts)
	j.Caches, notices = caches(r, j.Variables)
	res.Notices = append(res.Notices, notices...)
	j.RegistryCredentials = registryCredentials(r.Credentials)
	j.Dependencies = dependencies(r.Dependencies)
	for _, h := range r.Hooks {
		j.Hooks = append(j.Hooks, job.Hook{Name: h.Name, Script: cloneStrings(h.Script)})
	}
	if err := j.Validate(); err != nil {
		// GitLab always sends these; a job without them cannot run, and the
		// hub would refuse it (API-46). Fail it with the reason instead.
		return Result{}, &RefusalError{Failure: gitlab.FailureConfiguration,
			Message: "the job is missing what a vk node needs to run it", Err: err}
	}
	res.Job = j
	return res, nil
}

// jobInfo is who the job is: its IDs and names in GitLab, and the runner
// that took it.
func jobInfo(r *gitlab.JobResponse, rn Runner) job.JobInfo {
	return job.JobInfo{
		ID:              r.ID,
		Name:            r.JobInfo.Name,
		Stage:           r.JobInfo.Stage,
		PipelineID:      r.JobInfo.PipelineID,
		ProjectID:       r.JobInfo.ProjectID,
		ProjectName:     r.JobInfo.ProjectName,
		ProjectPath:     r.JobInfo.ProjectFullPath,
		NamespaceID:     r.JobInfo.NamespaceID,
		RootNamespaceID: r.JobInfo.RootNamespaceID,
		UserID:          r.JobInfo.UserID,
		RunnerID:        rn.RunnerID,
	}
}

// sources is what to check out; repoURL is the repository URL without
// the credentials GitLab put in it.
func sources(r *gitlab.JobResponse, repoURL string) job.Sources {
	return job.Sources{
		RepoURL:          repoURL,
		RepoObjectFormat: r.GitInfo.RepoObjectFormat,
		Ref:              r.GitInfo.Ref,
		SHA:              r.GitInfo.Sha,
		BeforeSHA:        r.GitInfo.BeforeSha,
		RefType:          r.GitInfo.RefType,
		Refspecs:         cloneStrings(r.GitInfo.Refspecs),
		Depth:            r.GitInfo.Depth,
		Protected:        cloneBool(r.GitInfo.Protected),
		AllowFetch:       r.AllowGitFetch,
	}
}

// steps are the job's steps; a step without a "when" runs on success.
func steps(in []gitlab.Step) []job.Step {
	var out []job.Step
	for _, s := range in {
		out = append(out, job.Step{
			Name:         s.Name,
			Script:       cloneStrings(s.Script),
			TimeoutSecs:  int64(s.Timeout),
			When:         orDefault(s.When, "on_success"),
			AllowFailure: s.AllowFailure,
		})
	}
	return out
}

// services are the job's service images. A service with several aliases
// keeps the first, with a warning naming the ones dropped.
func services(in []gitlab.Image) ([]job.Image, []Notice) {
	var out []job.Image
	var notices []Notice
	for _, s := range in {
		if aliases := s.Aliases(); len(aliases) > 1 {
			notices = append(notices, Notice{Level: LevelWarning, Text: fmt.Sprintf(
				"service %q has several aliases; vk uses the first, %q, and drops %s",
				s.Name, aliases[0], strings.Join(aliases[1:], ", "))})
		}
		out = append(out, image(s))
	}
	return out, notices
}

// artifacts are the job's uploads, by default on success and as zip.
func artifacts(in []gitlab.Artifact) []job.Artifact {
	var out []job.Artifact
	for _, a := range in {
		out = append(out, job.Artifact{
			Name:           a.Name,
			Untracked:      a.Untracked,
			Paths:          cloneStrings(a.Paths),
			Exclude:        cloneStrings(a.Exclude),
			When:           orDefault(a.When, "on_success"),
			ArtifactType:   a.ArtifactType,
			ArtifactFormat: orDefault(a.ArtifactFormat, "zip"),
			ExpireIn:       a.ExpireIn,
		})
	}
	return out
}

// registryCredentials keeps the credentials of type "registry", compared
// exactly as gitlab-runner's docker auth does; the others are not for
// image pulls.
func registryCredentials(in []gitlab.Credentials) []job.RegistryCredential {
	var out []job.RegistryCredential
	for _, c := range in {
		if c.Type != "registry" {
			continue
		}
		out = append(out, job.RegistryCredential{URL: c.URL, Username: c.Username, Password: c.Password})
	}
	return out
}

// dependencies are the jobs whose artifacts this one downloads, with the
// archive to fetch when GitLab names one.
func dependencies(in []gitlab.Dependency) []job.Dependency {
	var out []job.Dependency
	for _, d := range in {
		dep := job.Dependency{ID: d.ID, Token: d.Token, Name: d.Name}
		if d.ArtifactsFile != nil && d.ArtifactsFile.Filename != "" {
			dep.ArtifactsFile = &job.ArtifactsFile{Filename: d.ArtifactsFile.Filename, Size: d.ArtifactsFile.Size}
		}
		out = append(out, dep)
	}
	return out
}

// variables maps GitLab's variables, order and duplicates kept.
func variables(in []gitlab.Variable) []job.Variable {
	var out []job.Variable
	for _, v := range in {
		out = append(out, job.Variable{Key: v.Key, Value: v.Value, Public: v.Public, File: v.File, Masked: v.Masked, Raw: v.Raw})
	}
	return out
}

// runnerVariables are the runner's own variables the relay appends
// (SPEC-11), public as gitlab-runner marks them.
func runnerVariables(rn Runner) []job.Variable {
	ver, rev, arch := rn.Version, rn.Revision, rn.ExecutableArch
	if ver == "" {
		ver = version.Version
	}
	if rev == "" {
		rev = version.Commit
		if len(rev) > 8 {
			rev = rev[:8]
		}
		if rev == "" {
			rev = "unknown"
		}
	}
	if arch == "" {
		arch = runtime.GOOS + "/" + runtime.GOARCH
	}
	return []job.Variable{
		{Key: "CI_RUNNER_SHORT_TOKEN", Value: rn.ShortToken, Public: true},
		{Key: "CI_RUNNER_VERSION", Value: ver, Public: true},
		{Key: "CI_RUNNER_REVISION", Value: rev, Public: true},
		{Key: "CI_RUNNER_EXECUTABLE_ARCH", Value: arch, Public: true},
	}
}

// image maps an image or service; Alias keeps the first alias only
// (DECISIONS 8).
func image(in gitlab.Image) job.Image {
	out := job.Image{
		Name:       in.Name,
		Command:    cloneStrings(in.Command),
		Entrypoint: cloneStrings(in.Entrypoint),
		Variables:  variables(in.Variables),
		PullPolicy: cloneStrings(in.PullPolicy),
		Platform:   in.ExecutorOptions.Docker.Platform,
		User:       in.ExecutorOptions.User(),
	}
	if aliases := in.Aliases(); len(aliases) > 0 {
		out.Alias = aliases[0]
	}
	for _, p := range in.Ports {
		out.Ports = append(out.Ports, job.Port{Number: p.Number, Protocol: p.Protocol, Name: p.Name})
	}
	return out
}

// caches maps the cache entries, expanding and sanitising keys as
// gitlab-runner's shells/abstract.go newCacheConfig does, and returns the
// warnings and notices gitlab-runner would print for them. An entry whose
// key expands or sanitises to nothing is dropped, and so is such a
// fallback key (gitlab-runner skips them).
func caches(r *gitlab.JobResponse, vars []job.Variable) ([]job.Cache, []Notice) {
	if len(r.Cache) == 0 {
		return nil, nil
	}
	x := newExpander(vars)
	var out []job.Cache
	var notices []Notice
	warn := func(format string, args ...any) {
		notices = append(notices, Notice{Level: LevelWarning, Text: fmt.Sprintf(format, args...)})
	}
	// resolve turns a non-empty user key into its stored form: expanded,
	// then sanitised, with gitlab-runner's warnings. ok is false when
	// nothing usable is left.
	resolve := func(raw, skipping string) (string, bool) {
		raw = x.expand(raw)
		human, err := SanitizeCacheKey(raw)
		switch {
		case err != nil:
			warn("%s", err.Error())
		case human != raw:
			warn("cache key %q sanitized to %q", raw, human)
		}
		if human == "" {
			notices = append(notices, Notice{Level: LevelNotice, Text: "Skipping " + skipping + " due to empty cache key"})
			return "", false
		}
		return human, true
	}
	fallbackEnv, _ := job.Lookup(x.vars, "CACHE_FALLBACK_KEY")
	for _, c := range r.Cache {
		var k string
		if c.Key == "" {
			// gitlab-runner's default key "<job name>/<ref>", not expanded.
			def := path.Join("/", r.JobInfo.Name, r.GitInfo.Ref)[1:]
			human, err := SanitizeCacheKey(def)
			if err != nil || human == "" {
				notices = append(notices, Notice{Level: LevelNotice, Text: "Skipping cache extraction and archiving due to empty cache key"})
				continue
			}
			if human != def {
				warn("cache key %q sanitized to %q", def, human)
			}
			k = human
		} else {
			var ok bool
			if k, ok = resolve(c.Key, "cache extraction and archiving"); !ok {
				continue
			}
		}
		entry := job.Cache{
			Key:       k,
			Untracked: c.Untracked,
			Policy:    orDefault(x.expand(c.Policy), "pull-push"),
			Paths:     cloneStrings(c.Paths),
			When:      orDefault(c.When, "on_success"),
		}
		for _, fk := range c.FallbackKeys {
			// gitlab-runner expands a fallback key, then newCacheConfig
			// expands it again.
			if fk = x.expand(fk); fk == "" {
				continue
			}
			if k, ok := resolve(fk, "cache extraction"); ok {
				entry.FallbackKeys = append(entry.FallbackKeys, k)
			}
		}
		if fallbackEnv != "" {
			if k, ok := resolve(fallbackEnv, "cache extraction"); ok {
				if strings.HasSuffix(strings.TrimRight(k, ". "), "-protected") {
					warn("CACHE_FALLBACK_KEY %q not allowed to end in %q", k, "-protected")
				} else {
					entry.FallbackKeys = append(entry.FallbackKeys, k)
				}
			}
		}
		out = append(out, entry)
	}
	return out, notices
}

// policyNotices are gitlab-runner's printPolicyOptions lines (SPEC-23).
func policyNotices(p gitlab.PolicyOptions) []Notice {
	if !p.PolicyJob {
		return nil
	}
	out := []Notice{{Level: LevelInfo, Text: fmt.Sprintf(`Job triggered by policy "%s".`, p.Name)}}
	if p.VariableOverrideAllowed == nil {
		return append(out, Notice{Level: LevelInfo,
			Text: "Variables defined in the policy take precedence over matching user-defined CI/CD variables for this job."})
	}
	msg := "User-defined CI/CD variables are "
	if *p.VariableOverrideAllowed {
		msg += "allowed in this job"
	} else {
		msg += "ignored in this job"
	}
	if p.VariableOverrideExceptions != nil {
		msg += fmt.Sprintf(" (except for %s)", strings.Join(p.VariableOverrideExceptions, ", "))
	}
	return append(out, Notice{Level: LevelInfo, Text: msg + " according to the policy."})
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func cloneStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string(nil), s...)
}

func cloneBool(b *bool) *bool {
	if b == nil {
		return nil
	}
	v := *b
	return &v
}
