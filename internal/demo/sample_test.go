package demo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testlog"
)

// TestSampleShape pins what the demo promises: about 20 jobs over 3 stages
// and 2 tenants, an artifact passed between stages, a cache, one failing
// job and one that must wait for capacity.
func TestSampleShape(t *testing.T) {
	ts := Sample()
	if len(ts) != 2 {
		t.Fatalf("Sample() has %d tenants, want 2", len(ts))
	}
	if n := JobCount(ts); n < 18 || n > 22 {
		t.Errorf("JobCount = %d, want about 20", n)
	}
	failing, big, cached, artifacts := 0, 0, 0, 0
	for _, tn := range ts {
		if got := strings.Join(tn.Pipeline.Stages, ","); got != "build,test,deploy" {
			t.Errorf("%s stages = %s", tn.Name, got)
		}
		if len(tn.Want) != len(tn.Pipeline.Jobs) {
			t.Errorf("%s: Want has %d entries for %d jobs", tn.Name, len(tn.Want), len(tn.Pipeline.Jobs))
		}
		for _, j := range tn.Pipeline.Jobs {
			if tn.Want[j.Name] == gitlabfake.StateFailed {
				failing++
				if !j.AllowFailure {
					t.Errorf("%s/%s fails but does not allow failure: later stages would be skipped", tn.Name, j.Name)
				}
			}
			for _, v := range j.Variables {
				if v.Key == "MICROVM_MEM" {
					big++
				}
			}
			cached += len(j.Cache)
			artifacts += len(j.Artifacts)
			if j.Timeout == 0 {
				t.Errorf("%s/%s has no timeout", tn.Name, j.Name)
			}
		}
	}
	if failing != 1 || big != 1 || cached == 0 || artifacts == 0 {
		t.Errorf("failing=%d big=%d caches=%d artifacts=%d, want 1, 1, >0, >0", failing, big, cached, artifacts)
	}
}

// TestSampleLoadsIntoGitLab creates every tenant's project and pipeline in
// the fake GitLab: the first stage is pending, the rest created.
func TestSampleLoadsIntoGitLab(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	srv := gitlabfake.New(gitlabfake.Options{Logger: testlog.New(t)})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	for _, tn := range Sample() {
		if _, err := srv.CreateProject(tn.Project, tn.Files, gitlabfake.ProjectOptions{}); err != nil {
			t.Fatalf("CreateProject(%s): %v", tn.Project, err)
		}
		pl, err := srv.CreatePipeline(tn.Project, tn.Pipeline)
		if err != nil {
			t.Fatalf("CreatePipeline(%s): %v", tn.Project, err)
		}
		for _, j := range tn.Pipeline.Jobs {
			want := gitlabfake.StateCreated
			if j.Stage == "build" {
				want = gitlabfake.StatePending
			}
			if got := srv.JobState(pl.Jobs[j.Name]); got != want {
				t.Errorf("%s/%s state = %s, want %s", tn.Name, j.Name, got, want)
			}
		}
	}
}

// TestSampleScriptsRunLocally runs the sample's scripts with bash in stage
// order, passing artifacts and the cache by copying directories the way a
// runner would, so a broken sample shows up here and not as a mystery in
// the e2e tests. A second run of the cached job must hit the cache.
func TestSampleScriptsRunLocally(t *testing.T) {
	for _, bin := range []string{"bash", "git", "tar"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skip(bin + " not installed")
		}
	}
	for _, tn := range Sample() {
		t.Run(tn.Name, func(t *testing.T) {
			repo := t.TempDir()
			for name, content := range tn.Files {
				p := filepath.Join(repo, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			run(t, repo, "git init -q && git add -A && git -c user.name=t -c user.email=t@example.com commit -qm init")
			cache := t.TempDir()
			for pipeline := 1; pipeline <= 2; pipeline++ {
				arts := map[string]string{} // job → dir holding its artifacts
				for _, j := range tn.Pipeline.Jobs {
					if pipeline == 2 && len(j.Cache) == 0 {
						continue // the second run is for the cache
					}
					dir := t.TempDir()
					run(t, "", "cp -a "+repo+"/. "+dir)
					for _, dep := range earlier(tn.Pipeline, j) {
						if a, ok := arts[dep]; ok {
							run(t, "", "cp -a "+a+"/. "+dir)
						}
					}
					if len(j.Cache) > 0 {
						run(t, "", "cp -a "+cache+"/. "+dir)
					}
					script := "set -eo pipefail\nexport CI_PIPELINE_ID=" + string(rune('0'+pipeline)) + "\n"
					for _, v := range j.Variables {
						script += "export " + v.Key + "=" + v.Value + "\n"
					}
					script += strings.Join(j.Script, "\n")
					cmd := exec.Command("bash", "-c", script)
					cmd.Dir = dir
					out, err := cmd.CombinedOutput()
					got := gitlabfake.StateSuccess
					if err != nil {
						got = gitlabfake.StateFailed
					}
					if got != tn.Want[j.Name] {
						t.Fatalf("pipeline %d job %s: %s, want %s; output:\n%s", pipeline, j.Name, got, tn.Want[j.Name], out)
					}
					if j.Name == CacheJob {
						want := "cache miss"
						if pipeline == 2 {
							want = "cache hit"
						}
						if !strings.Contains(string(out), want) {
							t.Errorf("pipeline %d: %s output lacks %q:\n%s", pipeline, j.Name, want, out)
						}
					}
					if got == gitlabfake.StateSuccess && len(j.Artifacts) > 0 {
						a := t.TempDir()
						for _, p := range j.Artifacts[0].Paths {
							run(t, dir, "cp -a --parents "+strings.TrimSuffix(p, "/")+" "+a)
						}
						arts[j.Name] = a
					}
					for _, c := range j.Cache {
						for _, p := range c.Paths {
							run(t, dir, "cp -a --parents "+strings.TrimSuffix(p, "/")+" "+cache)
						}
					}
				}
			}
		})
	}
}

// earlier lists the jobs of stages before j's, whose artifacts j receives.
func earlier(p gitlabfake.PipelineSpec, j gitlabfake.JobSpec) []string {
	idx := map[string]int{}
	for i, s := range p.Stages {
		idx[s] = i
	}
	var out []string
	for _, o := range p.Jobs {
		if idx[o.Stage] < idx[j.Stage] {
			out = append(out, o.Name)
		}
	}
	return out
}

func run(t *testing.T, dir, script string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// AddImageJobs adds ImageJob to the web tenant only, in the test stage,
// in the image with its service, expected to succeed; the plain sample
// has no such job.
func TestAddImageJobs(t *testing.T) {
	for _, tn := range Sample() {
		for _, j := range tn.Pipeline.Jobs {
			if j.Image.Name != "" || len(j.Services) != 0 {
				t.Errorf("plain sample job %s/%s names an image or service", tn.Name, j.Name)
			}
		}
	}
	ts := Sample()
	before := JobCount(ts)
	const img = "127.0.0.1:5000/" + ImageRepoTag
	AddImageJobs(ts, img)
	if got := JobCount(ts); got != before+1 {
		t.Fatalf("JobCount %d after AddImageJobs, want %d", got, before+1)
	}
	for _, tn := range ts {
		var found *gitlabfake.JobSpec
		for i, j := range tn.Pipeline.Jobs {
			if j.Name == ImageJob {
				found = &tn.Pipeline.Jobs[i]
			}
		}
		if tn.Name != "web" {
			if found != nil {
				t.Errorf("%s got %s", tn.Name, ImageJob)
			}
			continue
		}
		if found == nil {
			t.Fatalf("web has no %s", ImageJob)
		}
		if found.Stage != "test" || found.Image.Name != img || found.Timeout == 0 {
			t.Errorf("%s = stage %q image %q timeout %v", ImageJob, found.Stage, found.Image.Name, found.Timeout)
		}
		if len(found.Services) != 1 || found.Services[0].Name != img || found.Services[0].Alias != ImageService {
			t.Errorf("%s services = %+v, want the image as %s", ImageJob, found.Services, ImageService)
		}
		if tn.Want[ImageJob] != gitlabfake.StateSuccess {
			t.Errorf("%s expected %s, want success", ImageJob, tn.Want[ImageJob])
		}
	}
}
