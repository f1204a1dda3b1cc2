package node

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/regtoken"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

// startCache is startWith for a start carrying cache registry c.
func startCache(t *testing.T, h *testHub, id, res string, spec job.JobSpec, c *dispatch.CacheRegistry) {
	t.Helper()
	from := h.mark()
	h.send(&dispatch.Offer{Reservation: res, Envelope: env1, LeaseSecs: 90})
	if rep, _ := waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == res }); rep.Reply != dispatch.ReplyAccepted {
		t.Fatalf("offer: %+v", rep)
	}
	h.send(&dispatch.Start{Job: id, Reservation: res, Envelope: env1, Spec: spec, Cache: c})
}

// A start carrying a cache repository and a token the hub minted keeps
// the job's caches exactly there with that token, on the real
// docker-registry under token authentication, even under [registry]
// guest_credential = "job" (where the node's own credential is never
// used): one job saves a cache and the next restores it, neither trace
// warns of skipped caches, the token the script prints is masked, and
// the node's state directory (its journal) never holds the token. A
// start whose repository is not a repository name skips its caches with
// a warning (XFER-14).
//
// spec: XFER-13, XFER-14, XFER-16
func TestStartCacheRegistryKeepsCachesWithTheJobsToken(t *testing.T) {
	keyFile, certFile := registrytest.SigningKey(t)
	reg := registrytest.NewWithTokenAuth(t, registrytest.TokenAuth{Service: "vk-registry", Issuer: "vk-hub", RootCertBundle: certFile})
	m, err := regtoken.New([]regtoken.Config{{URL: reg.URL(), Service: "vk-registry", Issuer: "vk-hub", KeyFile: keyFile, CertFile: certFile}})
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	h, _ := connected(t, func(c *Config) {
		c.Node.StateDir = stateDir
		c.Registry = RegistryConfig{URL: reg.URL(), Username: "vk-node", Password: Secret("node-password"),
			RepositoryPrefix: "vk-cache", GuestCredential: GuestCredentialJob}
	}, Options{})
	spec := testSpec("mkdir -p .cache && echo cached-with-the-job-token > .cache/f")
	tok, err := m.Mint(time.Now(), reg.URL(), regtoken.Job{ID: "job-save", GitLabURL: spec.GitLabCI.ServerURL, ProjectID: spec.GitLabCI.Job.ProjectID, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cacheOf := func(repo string) *dispatch.CacheRegistry {
		return &dispatch.CacheRegistry{Repository: repo, Token: tok.Bearer, ExpiresInSecs: int(tok.Lifetime / time.Second)}
	}
	run := func(id, res string, c *dispatch.CacheRegistry, policy string, script ...string) string {
		t.Helper()
		s := testSpec(script...)
		s.GitLabCI.Caches = []job.Cache{{Key: "deps", Paths: []string{".cache"}, Policy: policy}}
		from := h.mark()
		startCache(t, h, id, res, s, c)
		r := resultOf(h, from, id)
		out := string(h.output(id))
		if r.Result.Failure != "" {
			t.Fatalf("%s failed %q:\n%s", id, r.Result.Failure, out)
		}
		return out
	}
	saved := run("job-save", "r1", cacheOf(tok.Repository), "", "mkdir -p .cache && echo cached-with-the-job-token > .cache/f", "echo token="+tok.Bearer)
	restored := run("job-restore", "r2", cacheOf(tok.Repository), "pull", "cat .cache/f")
	for name, out := range map[string]string{"save": saved, "restore": restored} {
		if strings.Contains(out, "Skipping the cache") || strings.Contains(out, "Failed to") {
			t.Errorf("%s: caches were skipped or failed:\n%s", name, out)
		}
		if strings.Contains(out, tok.Bearer) {
			t.Errorf("%s: the trace holds the job's registry token", name)
		}
	}
	if !strings.Contains(saved, "Created cache") || !strings.Contains(saved, "token=[MASKED]") {
		t.Errorf("save: no cache created, or the token not masked:\n%s", saved)
	}
	if !strings.Contains(restored, "cached-with-the-job-token") || !strings.Contains(restored, reg.Addr+"/"+tok.Repository+":") {
		t.Errorf("restore: the cache did not come back from %s:\n%s", tok.Repository, restored)
	}
	bad := run("job-bad-repo", "r3", cacheOf("Not A Repository!"), "pull", "true")
	if !strings.Contains(bad, "WARNING: Skipping the cache: cache: not a valid repository name") {
		t.Errorf("a start with a bad repository: no warning:\n%s", bad)
	}
	filepath.WalkDir(stateDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(tok.Bearer)) {
			t.Errorf("%s holds the job's registry token", p)
		}
		return nil
	})
}
