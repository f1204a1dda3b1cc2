package job

// fullJob returns a CiJob with every field set, shaped after the fixture
// job_response_gitlab_complete.json as vk-gitlab translates it.
func fullJob() *CiJob {
	protected := true
	return &CiJob{
		Job: JobInfo{
			ID: 4242, Name: "rspec 1/2", Stage: "test", PipelineID: 901,
			ProjectID: 12, ProjectName: "web", ProjectPath: "acme/web",
			NamespaceID: 7, RootNamespaceID: 3, UserID: 55, RunnerID: 31,
		},
		Token: "glcbt-64_job-token-secret",
		Sources: Sources{
			RepoURL:          "https://gitlab.example.com/acme/web.git",
			RepoObjectFormat: "sha1",
			Ref:              "main",
			SHA:              "1f8b2e7c0d3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c",
			BeforeSHA:        "0000000000000000000000000000000000000000",
			RefType:          "branch",
			Refspecs:         []string{"+refs/pipelines/901:refs/pipelines/901", "+refs/heads/main:refs/remotes/origin/main"},
			Depth:            20,
			Protected:        &protected,
			AllowFetch:       true,
		},
		TimeoutSecs: 3600,
		Variables: []Variable{
			{Key: "CI_JOB_ID", Value: "4242", Public: true},
			{Key: "DEPLOY_KEY", Value: "-----BEGIN KEY-----", File: true},
			{Key: "API_TOKEN", Value: "s3cr3t-api-token", Masked: true},
			{Key: "LITERAL", Value: "$NOT_EXPANDED", Public: true, Raw: true},
			{Key: "CI_RUNNER_VERSION", Value: "0.4.1", Public: true},
		},
		Steps: []Step{
			{Name: StepScript, Script: []string{"bundle install", "bundle exec rspec"}, TimeoutSecs: 3600, When: "on_success"},
			{Name: StepAfterScript, Script: []string{"echo done"}, TimeoutSecs: 3600, When: "always", AllowFailure: true},
		},
		Image: &Image{
			Name: "ruby:3.3", Entrypoint: []string{"/bin/sh"},
			PullPolicy: []string{"always", "if-not-present"},
			Platform:   "arm64/v8", User: "1000:1000",
		},
		Services: []Image{{
			Name: "postgres:16", Alias: "db", Command: []string{"postgres", "-c", "fsync=off"},
			Ports:     []Port{{Number: 5432, Protocol: "http", Name: "pg"}},
			Variables: []Variable{{Key: "POSTGRES_PASSWORD", Value: "pg-secret", Masked: true}, {Key: "POSTGRES_DB", Value: "test", Public: true}},
		}},
		Artifacts: []Artifact{
			{Name: "coverage", Untracked: false, Paths: []string{"coverage/"}, Exclude: []string{"coverage/tmp/**"}, When: "on_success", ArtifactType: "archive", ArtifactFormat: "zip", ExpireIn: "1 week"},
			{Name: "junit", Paths: []string{"rspec.xml"}, When: "always", ArtifactType: "junit", ArtifactFormat: "gzip"},
		},
		Caches: []Cache{{
			Key: "gems-main-protected", Untracked: true, Policy: "pull-push", Paths: []string{"vendor/bundle"},
			When: "on_success", FallbackKeys: []string{"gems-default-protected"},
		}},
		RegistryCredentials: []RegistryCredential{{URL: "registry.gitlab.example.com", Username: "gitlab-ci-token", Password: "registry-secret"}},
		Dependencies: []Dependency{
			{ID: 4240, Token: "dep-token-secret", Name: "build", ArtifactsFile: &ArtifactsFile{Filename: "binaries.zip", Size: 13631488}},
			{ID: 4241, Token: "dep-token-2-secret", Name: "lint"},
		},
		Trace: TraceSettings{Sections: true, TokenMaskPrefixes: []string{"glpat-", "glcbt-"}, LimitBytes: DefaultTraceLimitBytes},
		Hooks: []Hook{
			{Name: HookPreGetSources, Script: []string{"echo before checkout"}},
			{Name: HookPostGetSources, Script: []string{"git lfs pull"}},
		},
		ServerURL:   "https://gitlab.example.com",
		ServerCAPEM: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
		Notices:     []Notice{{Level: "warning", Text: "service alias \"db2\" dropped: a node takes one alias per service"}},
	}
}

// minimalJob returns a CiJob with only required fields.
func minimalJob() *CiJob {
	return &CiJob{
		Job:         JobInfo{ID: 1, ProjectID: 2},
		Token:       "t",
		Sources:     Sources{RepoURL: "https://gitlab.example.com/a/b.git"},
		TimeoutSecs: 7200,
		Trace:       TraceSettings{LimitBytes: DefaultTraceLimitBytes},
		ServerURL:   "https://gitlab.example.com",
	}
}
