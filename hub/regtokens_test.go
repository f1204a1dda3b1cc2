package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/vk-ci/vk/hub/regtoken"
	"github.com/vk-ci/vk/internal/registrytest"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
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
// reg with bearer token tok, and reads its manifest back.
func pushAs(ctx context.Context, reg *registrytest.Registry, name, tok string) error {
	r, err := remote.NewRepository(reg.Addr + "/" + name)
	if err != nil {
		return err
	}
	r.PlainHTTP = true
	r.SetReferrersCapability(false)
	r.Client = &auth.Client{Client: http.DefaultClient, Credential: auth.StaticCredential(reg.Addr, auth.Credential{AccessToken: tok})}
	body := []byte("cache layer")
	blob := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(body), Size: int64(len(body))}
	if err := r.Push(ctx, blob, bytes.NewReader(body)); err != nil {
		return err
	}
	cfg := ocispec.DescriptorEmptyJSON
	if err := r.Push(ctx, cfg, bytes.NewReader(cfg.Data)); err != nil {
		return err
	}
	man, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: cfg, Layers: []ocispec.Descriptor{blob}})
	mdesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(man), Size: int64(len(man))}
	if err := r.PushReference(ctx, mdesc, bytes.NewReader(man), "v1"); err != nil {
		return err
	}
	_, rc, err := r.FetchReference(ctx, "v1")
	if err == nil {
		rc.Close()
	}
	return err
}

// registryRefused reports whether err is the registry's own 401 or 403.
func registryRefused(err error) bool {
	var er *errcode.ErrorResponse
	return errors.As(err, &er) && (er.StatusCode == http.StatusUnauthorized || er.StatusCode == http.StatusForbidden)
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
	keyFile, certFile := registrytest.SigningKey(t)
	reg := registrytest.NewWithTokenAuth(t, registrytest.TokenAuth{Service: "vk-registry", Issuer: "vk-hub", RootCertBundle: certFile})
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
	ctx := t.Context()
	if err := pushAs(ctx, reg, st.Cache.Repository, st.Cache.Token); err != nil {
		t.Fatalf("push to the job's repository with its token: %v\n%s", err, reg.Log())
	}
	if err := pushAs(ctx, reg, "ci-cache/gitlab.example.com/43/unprotected", st.Cache.Token); !registryRefused(err) {
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
