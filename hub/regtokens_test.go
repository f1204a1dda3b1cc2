package hub

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/regtoken"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// nodeUpWith plays node "n1" as [harness.nodeUp] does, reporting
// registry as its [registry] url.
func (h *harness) nodeUpWith(registry string) {
	h.t.Helper()
	if err := h.srv.Driver().NodeConnected(h.t.Context(), "n1", h.node, false); err != nil {
		h.t.Fatal(err)
	}
	h.nodeSay(&dispatch.Report{Resources: dispatch.Resources{Mem: 8 << 30, Disk: 40 << 30, CPUs: 8},
		Pools: []string{"linux"}, Labels: []string{"ssd"}, Registry: registry})
	h.nodeSay(&dispatch.Held{})
}

// pushAs pushes a one-layer artifact tagged v1 to repository name on
// reg with bearer token tok, and reads it back.
func pushAs(t *testing.T, reg *registrytest.Registry, name, tok string) error {
	t.Helper()
	r := reg.Repository(t, name, tok)
	if err := registrytest.PushArtifact(t.Context(), r, "v1", []byte("cache layer")); err != nil {
		return err
	}
	_, err := registrytest.PullArtifact(t.Context(), r, "v1")
	return err
}

// A job placed on a node whose reported registry is one of the hub's
// [[registries]] starts with a cache repository and a token the hub
// minted for it: the real docker-registry, trusting the hub's
// certificate, lets the token push and pull that repository and refuses
// another project's. The token is in the start frame only: neither the
// store's file nor the hub's logs hold it, before or after the job ends.
//
// spec: XFER-13, XFER-16, XFER-17
func TestStartCarriesMintedRegistryToken(t *testing.T) {
	reg, keyFile, certFile := registrytest.NewWithSigningKey(t, "vk-registry", "vk-hub")
	h := newHarness(t, func(c *Config) {
		c.Registries = []regtoken.Config{{URL: reg.URL(), Service: "vk-registry", Issuer: "vk-hub", KeyFile: keyFile, CertFile: certFile}}
	})
	h.relayUp(1)
	h.nodeUpWith(reg.URL() + "/")
	g := h.claimedFor("r1")
	v := h.submitOn(g, 3001)
	st := expectFrame[dispatch.Start](h)
	if st.Cache == nil || st.Cache.Token == "" {
		t.Fatalf("the start carries no cache registry: %+v", st.Cache)
	}
	if want := "ci-cache/gitlab.example.com/42/unprotected"; st.Cache.Repository != want {
		t.Errorf("Cache.Repository = %q, want %q", st.Cache.Repository, want)
	}
	if want := int((time.Hour + regtoken.LifetimeMargin) / time.Second); st.Cache.ExpiresInSecs != want {
		t.Errorf("Cache.ExpiresInSecs = %d, want the job's hour plus the margin, %d", st.Cache.ExpiresInSecs, want)
	}
	if err := pushAs(t, reg, st.Cache.Repository, st.Cache.Token); err != nil {
		t.Fatalf("push to the job's repository with its token: %v\n%s", err, reg.Log())
	}
	if err := pushAs(t, reg, "ci-cache/gitlab.example.com/43/unprotected", st.Cache.Token); !registrytest.Refused(err) {
		t.Errorf("push to another project's repository = %v, want the registry's 401/403", err)
	}

	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobAccepted})
	h.nodeSay(&dispatch.JobUpdate{Job: v.ID, State: dispatch.JobFinished})
	h.nodeSay(&dispatch.Result{Job: v.ID, Result: client.JobResult{}})
	h.advance(time.Second)
	if err := h.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(storePath(h))
	if err != nil {
		t.Fatal(err)
	}
	sig := st.Cache.Token[strings.LastIndexByte(st.Cache.Token, '.')+1:]
	for what, b := range map[string][]byte{"the store file": raw, "the logs": []byte(h.logs.String())} {
		if bytes.Contains(b, []byte(st.Cache.Token)) || bytes.Contains(b, []byte(sig)) {
			t.Errorf("%s holds the job's registry token", what)
		}
	}
	if !strings.Contains(h.logs.String(), "registry token for "+st.Cache.Repository) {
		t.Error("the hub's debug log does not say which repository it minted a token for")
	}
}

// A node whose registry matches none of the hub's [[registries]] (or
// that reports none) gets starts without a cache registry: it keeps
// caches with its own credential.
//
// spec: XFER-17
func TestStartWithoutTokenForOtherRegistry(t *testing.T) {
	keyFile, certFile := registrytest.SigningKey(t)
	for _, reported := range []string{"https://other-registry.example.com", ""} {
		t.Run("reported="+reported, func(t *testing.T) {
			h := newHarness(t, func(c *Config) {
				c.Registries = []regtoken.Config{{URL: "https://registry.example.com", Service: "s", Issuer: "i", KeyFile: keyFile, CertFile: certFile}}
			})
			h.relayUp(1)
			h.nodeUpWith(reported)
			h.submitOn(h.claimedFor("r1"), 3002)
			if st := expectFrame[dispatch.Start](h); st.Cache != nil {
				t.Errorf("start on a node reporting %q carries %+v, want no cache registry", reported, st.Cache)
			}
		})
	}
}
