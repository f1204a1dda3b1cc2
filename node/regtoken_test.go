package node

import (
	"bytes"
	"context"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/regtoken"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
	"oras.land/oras-go/v2/registry/remote"
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

// mintingRegistry starts the real docker-registry under token
// authentication and returns it with the hub's minter of tokens it
// accepts.
func mintingRegistry(t *testing.T) (*registrytest.Registry, *regtoken.Minter) {
	t.Helper()
	reg, keyFile, certFile := registrytest.NewWithSigningKey(t, "vk-registry", "vk-hub")
	m, err := regtoken.New([]regtoken.Config{{URL: reg.URL(), Service: "vk-registry", Issuer: "vk-hub", KeyFile: keyFile, CertFile: certFile}})
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
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
	reg, m := mintingRegistry(t)
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

// Under net_mode "switch" a job's guest registry proxy forwards with the
// same token its start's cache registry carries: against the real
// docker-registry under token authentication, a guest holding no
// credential pushes and pulls a blob of its cache repository through
// registry.vk, and the registry itself refuses it another project's
// repository (the 401 passes back through the proxy unchanged).
//
// spec: XFER-18, XFER-20
func TestSwitchProxyForwardsTheMintedToken(t *testing.T) {
	reg, m := mintingRegistry(t)
	tok, err := m.Mint(time.Now(), reg.URL(), regtoken.Job{ID: "j1", GitLabURL: "https://gitlab.example.com", ProjectID: 12, Protected: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := vmnetAgent(t, RegistryConfig{URL: reg.URL(), Username: "vk-node", Password: Secret("node-password"), GuestCredential: GuestCredentialJob}, NetModeSwitch)
	spec := b.microvmSpec(&job.CiJob{}, &dispatch.Start{Job: "j1",
		Cache: &dispatch.CacheRegistry{Repository: tok.Repository, Token: tok.Bearer, ExpiresInSecs: 600}}, vmnetT0)
	srv := httptest.NewServer(spec.Registry)
	defer srv.Close()
	// The guest's view: registry.vk:80 is the proxy.
	guest := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	}}}
	repo := func(name string) *remote.Repository { return registrytest.Repo(t, "registry.vk/"+name, guest) }
	body := []byte("a cache layer pushed through registry.vk")
	blob := registrytest.Blob(body)
	ctx := t.Context()
	if err := repo(tok.Repository).Push(ctx, blob, bytes.NewReader(body)); err != nil {
		t.Fatalf("push through the proxy to the job's repository: %v\n%s", err, reg.Log())
	}
	if ok, err := repo(tok.Repository).Exists(ctx, blob); !ok || err != nil {
		t.Errorf("the pushed blob through the proxy: exists %v, %v", ok, err)
	}
	err = repo("ci-cache/gitlab.example.com/13/protected").Push(ctx, blob, bytes.NewReader(body))
	if registrytest.Status(err) != http.StatusUnauthorized {
		t.Errorf("push through the proxy to another project's repository = %v, want the registry's 401", err)
	}
}
