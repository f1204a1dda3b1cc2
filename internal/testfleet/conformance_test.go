package testfleet_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
)

var updateConformance = flag.Bool("update-conformance", false, "rewrite testdata/conformance/*/expected.trace from this fleet's traces")

// conformanceDir holds one directory per case: job.json, a job response as
// GitLab sends it (a gitlab-runner fixture or a capture), and
// expected.trace, the trace gitlab-runner 19.3 (shell executor, bash)
// stores for it.
const conformanceDir = "testdata/conformance"

// TestTraceConformance serves each case's job.json through the fake GitLab
// to the real fleet (hub, node, relay) and compares the trace GitLab stored
// with expected.trace, both normalised by [normaliseTrace]: timestamps,
// identity lines and paths aside, the bytes must be the same. A case is
// added as one directory holding job.json and expected.trace; a capture
// from a real gitlab-runner can be dropped in as it is.
//
// spec: TRACE-01, TRACE-02, TRACE-05, STAGE-01, SPEC-01
func TestTraceConformance(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(conformanceDir, "*", "job.json"))
	if err != nil || len(dirs) == 0 {
		t.Skipf("no cases under %s", conformanceDir)
	}
	f := newFleet(t, testfleet.Options{})
	tn := f.Tenants()[0]
	for _, jf := range dirs {
		dir := filepath.Dir(jf)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(jf)
			if err != nil {
				t.Fatal(err)
			}
			project := "conformance/" + strings.ReplaceAll(name, "_", "-")
			pl, err := tn.CreatePipeline(project, readme, gitlabfake.PipelineSpec{
				Jobs: []gitlabfake.JobSpec{{Name: name, Stage: "test", Response: raw}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tn.WaitFinished(timeout(t, 90*time.Second), pl); err != nil {
				t.Fatal(err)
			}
			got := normaliseTrace(tn.GitLab.Trace(pl.Jobs[name]), project)
			file := filepath.Join(dir, "expected.trace")
			if *updateConformance {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update-conformance to create it from this fleet)", err)
			}
			if diff := cmp.Diff(string(normaliseTrace(want, fixtureProject(t, raw))), string(got)); diff != "" {
				t.Errorf("trace differs from %s (-want +got):\n%s", file, diff)
			}
		})
	}
}

// fixtureProject is job_info.project_full_path of a job response: the
// project path a capture of it shows.
func fixtureProject(t *testing.T, raw []byte) string {
	var r struct {
		JobInfo struct {
			ProjectFullPath string `json:"project_full_path"`
		} `json:"job_info"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r.JobInfo.ProjectFullPath
}

var (
	stampRe    = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z `)
	sectionRe  = regexp.MustCompile(`section_(start|end):\d+:`)
	identityRe = regexp.MustCompile(`(?m)^(TIME \d\d[OE][ +])\x1b\[0K(Running with |  on |Using |\x1b\[36;1mPreparing the ")[^\n]*$`)
	hostRe     = regexp.MustCompile(`Running on [^\n]*\.\.\.`)
	gitalyRe   = regexp.MustCompile(`Gitaly correlation ID: [0-9a-zA-Z_-]+`)
	checkoutRe = regexp.MustCompile(`Checking out [0-9a-f]{8} as detached HEAD`)
)

// normaliseTrace makes a trace comparable across runners and runs: entry
// timestamps become TIME and section markers' seconds UNIX; the identity
// lines (Running with, "  on", the executor's "Using …" and "Preparing the
// …" title, "Running on <host>") say IDENTITY or HOST; the Gitaly
// correlation ID, the commit checked out and any path ending in the
// project's path (the builds directory differs) are replaced. Everything
// else — stream numbers, types, continuation flags, ANSI sequences,
// masking, messages — is compared byte for byte.
func normaliseTrace(b []byte, project string) []byte {
	s := stampRe.ReplaceAllString(string(b), "TIME ")
	s = sectionRe.ReplaceAllString(s, "section_${1}:UNIX:")
	s = identityRe.ReplaceAllString(s, "${1}IDENTITY")
	s = hostRe.ReplaceAllString(s, "Running on HOST...")
	s = gitalyRe.ReplaceAllString(s, "Gitaly correlation ID: ID")
	s = checkoutRe.ReplaceAllString(s, "Checking out SHA as detached HEAD")
	if project != "" {
		s = regexp.MustCompile(`[^\s'"]*/`+regexp.QuoteMeta(project)).ReplaceAllString(s, "$$CI_PROJECT_DIR")
	}
	return bytes.Clone([]byte(s))
}
