package testfleet_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/node"
)

// Caches through job registry tokens, end to end: the fleet's registry
// accepts only bearer tokens signed by the hub's key, the hub mints one
// for every start (its [[registries]] names the registry the node
// reports), and the node runs under [registry] guest_credential = "job",
// where its own credential never serves a cache. A build job saves a
// cache and the next stage's job restores it: both traces show the cache
// kept in the job's own repository (the project's ci-cache path with the
// ref's protection, not the node's repository_prefix) and neither warns
// that caches were skipped. No token reaches the hub's store, a trace or
// GitLab.
//
// spec: XFER-13, XFER-16, XFER-17
func TestCachesThroughMintedRegistryTokens(t *testing.T) {
	needBinaries(t, testfleet.RegistryBinary)
	dir := t.TempDir()
	f := newFleet(t, testfleet.Options{Dir: dir, Caches: true, RegistryTokens: true,
		Node: func(_ int, c *node.Config) { c.Registry.GuestCredential = node.GuestCredentialJob }})
	tn := f.Tenants()[0]
	pl, err := tn.CreatePipeline("acme/tokens", readme, gitlabfake.PipelineSpec{Jobs: []gitlabfake.JobSpec{
		{Name: "build", Stage: "build", Script: []string{"mkdir -p .cache && echo cached-through-a-minted-token > .cache/c.txt"},
			Cache: []gitlabfake.Cache{{Key: "deps", Paths: []string{".cache"}}}},
		{Name: "test", Stage: "test", Script: []string{"echo cache=$(cat .cache/c.txt)"},
			Cache: []gitlabfake.Cache{{Key: "deps", Paths: []string{".cache"}, Policy: "pull"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, 3*time.Minute)
	states, err := tn.WaitFinished(ctx, pl)
	if err != nil {
		t.Fatal(err)
	}
	proj, _ := tn.Project("acme/tokens")
	for name, want := range map[string]string{"build": "Created cache", "test": "cache=cached-through-a-minted-token\n"} {
		ji, err := tn.GitLab.Job(pl.Jobs[name])
		if err != nil {
			t.Fatal(err)
		}
		plain := stripANSI(string(ji.Trace))
		if states[name] != gitlabfake.StateSuccess {
			t.Errorf("%s = %s (%q), want success:\n%s", name, states[name], ji.FailureReason, plain)
		}
		if !strings.Contains(plain, want) || strings.Contains(plain, "Skipping the cache") || strings.Contains(plain, "Failed to") {
			t.Errorf("%s trace lacks %q or warns of its cache:\n%s", name, want, plain)
		}
		// The fake GitLab protects main: the repository names it. The
		// GitLab host is the relay's URL for it (a link's port).
		own := regexp.MustCompile(fmt.Sprintf(`Downloading cache from %s/ci-cache/[a-z0-9.-]+/%d/protected:[0-9a-f]{64}\n`,
			regexp.QuoteMeta(f.RegistryHost()), proj.ID))
		if name == "test" && !own.MatchString(plain) {
			t.Errorf("%s: the cache did not come from the job's own repository (%s):\n%s", name, own, plain)
		}
		if bytes.Contains(ji.Trace, tokenPrefix) {
			t.Errorf("%s: GitLab's trace holds a registry token", name)
		}
	}
	checkTraces(t, ctx, tn, pl)
	raw, err := os.ReadFile(filepath.Join(dir, "hub", "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, tokenPrefix) {
		t.Error("the hub's store holds a registry token")
	}
}

// tokenPrefix begins every registry token the fleet's hub mints: the
// encoded start of its JOSE header.
var tokenPrefix = []byte(base64.RawURLEncoding.EncodeToString([]byte(`{"typ":"JWT","alg":"ES256","x5c":`))[:40])
