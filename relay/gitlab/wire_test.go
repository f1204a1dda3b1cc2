package gitlab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readFixture reads a file of testdata/ (copies of the shared GitLab
// fixtures, generated from gitlab-runner's sources; see NOTICE).
func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jobResponseFixtures(t testing.TB) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join("testdata", "job_response_*.json"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no job response fixtures: %v", err)
	}
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	return names
}

// Every fixture decodes, and re-encoding what was decoded loses no key the
// fixture had (except the ones vk decodes leniently: null values).
// spec: SPEC-26, SPEC-27
func TestDecodeJobResponseFixtures(t *testing.T) {
	for _, name := range jobResponseFixtures(t) {
		t.Run(name, func(t *testing.T) {
			raw := readFixture(t, name)
			j, err := DecodeJobResponse(raw)
			if err != nil {
				t.Fatalf("DecodeJobResponse: %v", err)
			}
			if j.ID == 0 || j.Token == "" {
				t.Errorf("id=%d token=%q, want both set", j.ID, j.Token)
			}
			// Every top-level key of the fixture must be a field we decode.
			var top map[string]json.RawMessage
			if err := json.Unmarshal(raw, &top); err != nil {
				t.Fatal(err)
			}
			known := jsonFieldNames(reflect.TypeFor[JobResponse]())
			for k := range top {
				if !slices.Contains(known, k) {
					t.Errorf("fixture key %q has no JobResponse field", k)
				}
			}
			// Every nested key with a value survives decoding: re-encoding
			// the decoded job has it with the same value.
			again, err := json.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			want, got := valuePaths(t, raw), valuePaths(t, again)
			for p, v := range want {
				if strings.HasSuffix(p, ".blammo") || strings.HasSuffix(p, ".powpow") {
					continue // unknown executor_opts are recorded, not kept
				}
				if got[p] != v {
					t.Errorf("%s = %s after decoding, fixture has %s", p, got[p], v)
				}
			}
		})
	}
}

// valuePaths maps the path of every scalar in a JSON document (array
// elements by index) to its JSON text, leaving out nulls, false, "" and
// empty containers (which vk may omit when encoding).
func valuePaths(t *testing.T, b []byte) map[string]string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(p string, v any)
	walk = func(p string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(p+"."+k, e)
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", p, i), e)
			}
		case nil, bool, string:
			if x != nil && x != false && x != "" {
				b, _ := json.Marshal(x)
				out[p] = string(b)
			}
		default:
			b, _ := json.Marshal(x)
			out[p] = string(b)
		}
	}
	walk("", v)
	return out
}

// jsonFieldNames lists a struct type's JSON keys.
func jsonFieldNames(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		if tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	return out
}

// The full fixture decodes into exactly the values gitlab-runner's
// assertOnJobResponse checks, and every other field of it.
// spec: SPEC-26, GL-19
func TestDecodeJobResponseFull(t *testing.T) {
	j, err := DecodeJobResponse(readFixture(t, "job_response_full.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.UnsupportedOptions(); err != nil {
		t.Fatalf("UnsupportedOptions() = %v, want nil", err)
	}
	// Clear unexported bookkeeping for the comparison.
	want := &JobResponse{
		ID:    10,
		Token: "job-token",
		JobInfo: JobInfo{
			Name: "test-job", Stage: "test", ProjectID: 123, ProjectName: "test-project",
		},
		GitInfo: GitInfo{
			RepoURL: "https://gitlab-ci-token:testTokenHere1234@gitlab.example.com/test/test-project.git",
			Ref:     "main", Sha: "abcdef123456", BeforeSha: "654321fedcba", RefType: "branch",
		},
		RunnerInfo: RunnerInfo{Timeout: 3600},
		Variables:  []Variable{{Key: "CI_REF_NAME", Value: "main", Public: true, File: true, Raw: true}},
		Steps: []Step{
			{Name: "script", Script: []string{"date", "ls -ls"}, Timeout: 3600, When: "on_success"},
			{Name: "after_script", Script: []string{"ls -ls"}, Timeout: 3600, When: "always", AllowFailure: true},
		},
		Image: Image{Name: "ruby:3.3", Entrypoint: []string{"/bin/sh"},
			ExecutorOptions: ExecutorOptions{Docker: DockerOptions{Platform: "arm64/v8"}}},
		Services: []Image{
			{Name: "postgresql:9.5", Entrypoint: []string{"/bin/sh"}, Command: []string{"sleep", "30"}, Alias: "db-pg",
				ExecutorOptions: ExecutorOptions{Docker: DockerOptions{Platform: "amd64/linux"}}},
			{Name: "mysql:5.6", Alias: "db-mysql",
				ExecutorOptions: ExecutorOptions{Docker: DockerOptions{Platform: "arm"}}},
		},
		Artifacts: []Artifact{{Name: "artifact.zip", Paths: []string{"out/*"}, When: "always", ExpireIn: "7d"}},
		Cache:     []Cache{{Key: "$CI_COMMIT_SHA", Paths: []string{"vendor/*"}, Policy: "push"}},
		Credentials: []Credentials{{Type: "Registry", URL: "http://registry.gitlab.example.com/",
			Username: "gitlab-ci-token", Password: "job-token"}},
		Dependencies: []Dependency{{ID: 9, Name: "other-job", Token: "other-job-token",
			ArtifactsFile: &ArtifactsFile{Filename: "binaries.zip", Size: 13631488}}},
	}
	if diff := cmp.Diff(want, j, cmp.AllowUnexported(ExecutorOptions{}, DockerOptions{}, KubernetesOptions{})); diff != "" {
		t.Errorf("decoded job (-want +got):\n%s", diff)
	}
}

// The unsupported-options fixture decodes, and its unknown keys are named
// as gitlab-runner names them.
// spec: GL-23, SPEC-14
func TestDecodeJobResponseUnsupportedExecutorOpts(t *testing.T) {
	j, err := DecodeJobResponse(readFixture(t, "job_response_unsupported_executor_opts.json"))
	if err != nil {
		t.Fatal(err)
	}
	uerr := j.UnsupportedOptions()
	if uerr == nil {
		t.Fatal("UnsupportedOptions() = nil, want blammo and powpow")
	}
	for _, want := range []string{"blammo", "powpow",
		`Unsupported "image" options [blammo] for "docker executor"; supported options are [platform user]`} {
		if !strings.Contains(uerr.Error(), want) {
			t.Errorf("UnsupportedOptions() = %q, want it to contain %q", uerr, want)
		}
	}
	var uoe *UnsupportedOptionsError
	if !errors.As(uerr, &uoe) {
		t.Errorf("UnsupportedOptions() is not an *UnsupportedOptionsError: %T", uerr)
	}
	if got := j.Services[1].ExecutorOptions.Docker.Platform; got != "arm" {
		t.Errorf("services[1] platform = %q, want arm", got)
	}
}

// Port of gitlab-runner common/network_test.go Test_Image_ExecutorOptions_UnmarshalJSON.
// spec: GL-23, SPEC-14
func Test_Image_ExecutorOptions_UnmarshalJSON(t *testing.T) {
	tests := map[string]struct {
		json           string
		platform       string
		dockerUser     StringOrInt
		k8sUser        StringOrInt
		expectedErrMsg []string
	}{
		"no executor_opts":      {json: `{"executor_opts":{}}`},
		"null executor_opts":    {json: `{"executor_opts":null}`},
		"docker, empty":         {json: `{"executor_opts":{"docker": {}}}`},
		"docker, only user":     {json: `{"executor_opts":{"docker": {"user": "ubuntu"}}}`, dockerUser: "ubuntu"},
		"docker, only platform": {json: `{"executor_opts":{"docker": {"platform": "amd64"}}}`, platform: "amd64"},
		"docker, all options": {json: `{"executor_opts":{"docker": {"platform": "arm64", "user": "ubuntu"}}}`,
			platform: "arm64", dockerUser: "ubuntu"},
		"docker, user as int64": {json: `{"executor_opts":{"docker": {"user": 1000}}}`, dockerUser: "1000"},
		"docker, invalid options": {json: `{"executor_opts":{"docker": {"foobar": 1234}}}`,
			expectedErrMsg: []string{`Unsupported "image" options [foobar] for "docker executor"; supported options are [platform user]`}},
		"kubernetes, empty":         {json: `{"executor_opts":{"kubernetes": {}}}`},
		"kubernetes, all options":   {json: `{"executor_opts":{"kubernetes": {"user": "1000"}}}`, k8sUser: "1000"},
		"kubernetes, user as int64": {json: `{"executor_opts":{"kubernetes": {"user": 1000}}}`, k8sUser: "1000"},
		"kubernetes, invalid options": {json: `{"executor_opts":{"kubernetes": {"foobar": 1234}}}`,
			expectedErrMsg: []string{`Unsupported "image" options [foobar] for "kubernetes executor"; supported options are [user]`}},
		"invalid executor": {json: `{"executor_opts":{"k8s": {}}}`,
			expectedErrMsg: []string{`Unsupported "image" options [k8s] for "executor_opts"; supported options are [docker kubernetes]`}},
		"docker, invalid executor, valid executor, invalid option": {
			json:     `{"executor_opts":{"k8s": {}, "docker": {"platform": "amd64", "foobar": 1234}}}`,
			platform: "amd64",
			expectedErrMsg: []string{
				`Unsupported "image" options [k8s] for "executor_opts"; supported options are [docker kubernetes]`,
				`Unsupported "image" options [foobar] for "docker executor"; supported options are [platform user]`,
			},
		},
		"kubernetes, invalid executor, valid executor, invalid option": {
			json:    `{"executor_opts":{"dockers": {}, "kubernetes": {"user": "1000", "foobar": 1234}}}`,
			k8sUser: "1000",
			expectedErrMsg: []string{
				`Unsupported "image" options [dockers] for "executor_opts"; supported options are [docker kubernetes]`,
				`Unsupported "image" options [foobar] for "kubernetes executor"; supported options are [user]`,
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var got Image
			if err := json.Unmarshal([]byte(tt.json), &got); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			eo := got.ExecutorOptions
			if eo.Docker.Platform != tt.platform || eo.Docker.User != tt.dockerUser || eo.Kubernetes.User != tt.k8sUser {
				t.Errorf("got platform=%q docker.user=%q kubernetes.user=%q, want %q %q %q",
					eo.Docker.Platform, eo.Docker.User, eo.Kubernetes.User, tt.platform, tt.dockerUser, tt.k8sUser)
			}
			err := got.ExecutorOptions.Unsupported()
			if len(tt.expectedErrMsg) == 0 {
				if err != nil {
					t.Errorf("Unsupported() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Unsupported() = nil, want %q", tt.expectedErrMsg)
			}
			for _, m := range tt.expectedErrMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("Unsupported() = %q, want it to contain %q", err, m)
				}
			}
		})
	}
}

// A user that is neither string nor integer fails decoding.
func TestStringOrIntRejectsOtherTypes(t *testing.T) {
	var img Image
	if err := json.Unmarshal([]byte(`{"executor_opts":{"docker":{"user":[1]}}}`), &img); err == nil {
		t.Fatal("Unmarshal accepted an array user")
	}
}

// Port of gitlab-runner common/network_test.go TestFeaturesInfo_JSONMarshaling:
// all 31 keys, in gitlab-runner's order, no omitempty.
// spec: GL-23
func TestFeaturesInfo_JSONMarshaling(t *testing.T) {
	allFalse := `{"variables":false,"image":false,"services":false,"artifacts":false,"cache":false,"fallback_cache_keys":false,"shared":false,"upload_multiple_artifacts":false,"upload_raw_artifacts":false,"session":false,"terminal":false,"refspecs":false,"masking":false,"proxy":false,"raw_variables":false,"artifacts_exclude":false,"multi_build_steps":false,"trace_reset":false,"trace_checksum":false,"trace_size":false,"vault_secrets":false,"cancelable":false,"return_exit_code":false,"service_variables":false,"service_multiple_aliases":false,"image_executor_opts":false,"service_executor_opts":false,"cancel_gracefully":false,"native_steps_integration":false,"two_phase_job_commit":false,"job_inputs":false}`
	someEnabled := `{"variables":true,"image":true,"services":false,"artifacts":false,"cache":false,"fallback_cache_keys":false,"shared":false,"upload_multiple_artifacts":false,"upload_raw_artifacts":false,"session":false,"terminal":false,"refspecs":false,"masking":false,"proxy":false,"raw_variables":false,"artifacts_exclude":false,"multi_build_steps":false,"trace_reset":false,"trace_checksum":false,"trace_size":false,"vault_secrets":false,"cancelable":false,"return_exit_code":false,"service_variables":false,"service_multiple_aliases":false,"image_executor_opts":false,"service_executor_opts":false,"cancel_gracefully":false,"native_steps_integration":false,"two_phase_job_commit":true,"job_inputs":true}`
	tests := []struct {
		name     string
		features FeaturesInfo
		expected string
	}{
		{"all default (disabled)", FeaturesInfo{}, allFalse},
		{"some enabled", FeaturesInfo{Variables: true, Image: true, TwoPhaseJobCommit: true, JobInputs: true}, someEnabled},
		{"all enabled", allFeatures(), strings.ReplaceAll(allFalse, "false", "true")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.features)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.expected {
				t.Errorf("Marshal =\n%s\nwant\n%s", b, tt.expected)
			}
			var back FeaturesInfo
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back != tt.features {
				t.Errorf("round trip = %+v, want %+v", back, tt.features)
			}
		})
	}
}

func allFeatures() FeaturesInfo {
	var f FeaturesInfo
	v := reflect.ValueOf(&f).Elem()
	for i := range v.NumField() {
		v.Field(i).SetBool(true)
	}
	return f
}

// gl06 are the features vk-gitlab must not advertise (GL-06).
var gl06 = []string{"session", "terminal", "proxy", "shared", "vault_secrets", "service_multiple_aliases",
	"image_executor_opts", "service_executor_opts", "native_steps_integration", "job_inputs"}

// gl05 are the features vk-gitlab must advertise (GL-05).
var gl05 = []string{"variables", "image", "services", "artifacts", "cache", "fallback_cache_keys",
	"upload_multiple_artifacts", "upload_raw_artifacts", "refspecs", "masking", "raw_variables",
	"artifacts_exclude", "multi_build_steps", "trace_reset", "trace_checksum", "trace_size", "cancelable",
	"cancel_gracefully", "return_exit_code", "service_variables", "two_phase_job_commit"}

// The advertised features are gitlab-runner's docker executor's
// (fixtures/gitlab/features.json) minus what vk does not support: gl05
// true, gl06 false, all 31 keys in gitlab-runner's order.
// spec: GL-05, GL-06, GL-23
func TestAdvertisedFeaturesMatchFixture(t *testing.T) {
	got, err := json.Marshal(AdvertisedFeatures())
	if err != nil {
		t.Fatal(err)
	}
	fixture := readFixture(t, "features.json")
	var want map[string]bool
	if err := json.Unmarshal(fixture, &want); err != nil {
		t.Fatal(err)
	}
	for _, k := range gl06 {
		want[k] = false
	}
	var gotMap map[string]bool
	if err := json.Unmarshal(got, &gotMap); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, gotMap); diff != "" {
		t.Errorf("features (-docker fixture minus GL-06 +advertised):\n%s", diff)
	}
	for _, k := range gl05 {
		if !gotMap[k] {
			t.Errorf("GL-05 feature %q not advertised", k)
		}
	}
	trues := 0
	for _, v := range gotMap {
		if v {
			trues++
		}
	}
	if trues != len(gl05) {
		t.Errorf("%d features advertised, want exactly GL-05's %d", trues, len(gl05))
	}
	if keyOrder(t, got) != keyOrder(t, fixture) {
		t.Errorf("key order differs from gitlab-runner's:\n got %s\nwant %s", keyOrder(t, got), keyOrder(t, fixture))
	}
}

// keyOrder lists an object's keys in document order.
func keyOrder(t *testing.T, b []byte) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	var keys []string
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return strings.Join(keys, ",")
}

// The request bodies vk sends have gitlab-runner's shape: the same keys as
// the fixtures' bodies, info.executor "vk", info.shell "bash".
// spec: GL-01, GL-03, GL-07, GL-23
func TestRequestBodiesMatchFixtureShapes(t *testing.T) {
	info := DefaultInfo()
	tests := []struct {
		fixture string
		body    any
	}{
		{"jobs_request_body.json", JobRequest{Info: info, Token: "t", SystemID: "s_0123456789ab", LastUpdate: "x"}},
		{"jobs_request_body_first.json", JobRequest{Info: info, Token: "t", SystemID: "s_0123456789ab"}},
		{"verify_request_body.json", VerifyRunnerRequest{Info: info, Token: "t", SystemID: "s_0123456789ab"}},
		{"update_job_accept_running.json", UpdateJobRequest{Info: info, Token: "t", State: StateRunning}},
		{"update_job_keepalive.json", UpdateJobRequest{Info: info, Token: "t", State: StateRunning,
			Checksum: "crc32:2690bbf4", Output: TraceOutput{Checksum: "crc32:2690bbf4", Bytesize: 80}}},
		{"update_job_success.json", UpdateJobRequest{Info: info, Token: "t", State: StateSuccess,
			Checksum: "crc32:2690bbf4", Output: TraceOutput{Checksum: "crc32:2690bbf4", Bytesize: 80}}},
		{"update_job_failed.json", UpdateJobRequest{Info: info, Token: "t", State: StateFailed,
			FailureReason: ReasonScriptFailure, Checksum: "crc32:2690bbf4",
			Output: TraceOutput{Checksum: "crc32:2690bbf4", Bytesize: 80}, ExitCode: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			got, err := json.Marshal(tt.body)
			if err != nil {
				t.Fatal(err)
			}
			fixture := readFixture(t, tt.fixture)
			if g, w := shape(t, got), shape(t, fixture); g != w {
				t.Errorf("shape\n got %s\nwant %s", g, w)
			}
			var m struct {
				Info Info `json:"info"`
			}
			if err := json.Unmarshal(got, &m); err != nil {
				t.Fatal(err)
			}
			if m.Info.Executor != "vk" || m.Info.Shell != "bash" {
				t.Errorf("info executor=%q shell=%q, want vk, bash", m.Info.Executor, m.Info.Shell)
			}
		})
	}
}

// shape renders the key paths of a JSON document (keys at every level of
// objects, not values).
func shape(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var paths []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, x := range m {
				paths = append(paths, prefix+k)
				if prefix == "info." && k == "features" {
					// Its values differ by design; its keys are checked by
					// TestAdvertisedFeaturesMatchFixture.
					continue
				}
				walk(prefix+k+".", x)
			}
		}
	}
	walk("", v)
	slices.Sort(paths)
	return strings.Join(paths, " ")
}

// The checksum and size of the fixtures' 80-byte trace are what
// gitlab-runner sent for it.
// spec: GL-13, GL-15
func TestTraceChecksumFixture(t *testing.T) {
	trace := []byte("\x1b[0KRunning with gitlab-runner 19.4.0 (d79f3e7b)\x1b[0;m\n\x1b[32;1mJob succeeded\x1b[0;m\n")
	want := TraceOutput{Checksum: "crc32:2690bbf4", Bytesize: 80}
	if got := TraceChecksum(trace); got != want {
		t.Errorf("TraceChecksum = %+v, want %+v", got, want)
	}
	var d TraceDigest
	for _, chunk := range bytes.SplitAfter(trace, []byte("\n")) {
		_, _ = d.Write(chunk)
	}
	if got := d.Output(); got != want {
		t.Errorf("TraceDigest in chunks = %+v, want %+v", got, want)
	}
	var empty TraceDigest
	if got := empty.Output(); got != (TraceOutput{Checksum: "crc32:00000000"}) {
		t.Errorf("empty digest = %+v", got)
	}
}

// Undecodable bodies fail with ErrDecode; their id and token are still
// read when present.
func TestDecodeJobResponseErrors(t *testing.T) {
	for _, body := range []string{``, `{`, `[]`, `{"id":"x"}`, `{"id":1} {"id":2}`, `{"variables":{}}`} {
		if _, err := DecodeJobResponse([]byte(body)); !errors.Is(err, ErrDecode) {
			t.Errorf("DecodeJobResponse(%q) err = %v, want ErrDecode", body, err)
		}
	}
	id, ok := DecodeJobIdentity([]byte(`{"id": 7, "token": "tok", "variables": {}}`))
	if !ok || id != (JobIdentity{ID: 7, Token: "tok"}) {
		t.Errorf("DecodeJobIdentity = %+v, %v", id, ok)
	}
	if _, ok := DecodeJobIdentity([]byte(`garbage`)); ok {
		t.Error("DecodeJobIdentity(garbage) ok")
	}
}

// run is a JSON string holding steps.
// spec: SPEC-22
func TestRunSteps(t *testing.T) {
	j, err := DecodeJobResponse(readFixture(t, "job_response_steps_run.json"))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := j.RunSteps()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range steps {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "echo,ls,env" {
		t.Errorf("run steps = %s", got)
	}
	if _, err := (&JobResponse{Run: "nope"}).RunSteps(); err == nil {
		t.Error("RunSteps accepted a non-array")
	}
}

// spec: GL-10
func TestDebugTrace(t *testing.T) {
	tests := []struct {
		vars []Variable
		want bool
	}{
		{nil, false},
		{[]Variable{{Key: "CI_DEBUG_TRACE", Value: "true"}}, true},
		{[]Variable{{Key: "CI_DEBUG_TRACE", Value: "TRUE"}}, true},
		{[]Variable{{Key: "CI_DEBUG_TRACE", Value: "1"}}, true},
		{[]Variable{{Key: "CI_DEBUG_TRACE", Value: "2"}}, false},
		{[]Variable{{Key: "CI_DEBUG_TRACE", Value: "true"}, {Key: "CI_DEBUG_TRACE", Value: "false"}}, false},
		{[]Variable{{Key: "CI_DEBUG_SERVICES", Value: "true"}}, true},
	}
	for _, tt := range tests {
		if got := (&JobResponse{Variables: tt.vars}).DebugTrace(); got != tt.want {
			t.Errorf("DebugTrace(%v) = %v, want %v", tt.vars, got, tt.want)
		}
	}
}

// FuzzDecodeJobResponse: decoding untrusted job responses never panics,
// and decoding is idempotent: encode(decode(x)) decodes to a value that
// encodes the same.
func FuzzDecodeJobResponse(f *testing.F) {
	for _, name := range jobResponseFixtures(f) {
		f.Add(readFixture(f, name))
	}
	f.Add([]byte(`{"image":{"executor_opts":{"docker":{"user":1000,"x":1},"y":null}}}`))
	f.Add([]byte(`{"id":1,"run":"[{\"name\":\"a\"}]","secrets":{"s":{"vault":{}}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := DecodeJobResponse(body)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("error does not wrap ErrDecode: %v", err)
			}
			_, _ = DecodeJobIdentity(body)
			return
		}
		_ = j.UnsupportedOptions()
		_, _ = j.RunSteps()
		_ = j.DebugTrace()
		once, err := json.Marshal(j)
		if err != nil {
			t.Fatalf("re-encoding a decoded job: %v", err)
		}
		j2, err := DecodeJobResponse(once)
		if err != nil {
			t.Fatalf("decoding a re-encoded job: %v\n%s", err, once)
		}
		twice, err := json.Marshal(j2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatalf("not idempotent:\n%s\n%s", once, twice)
		}
	})
}
