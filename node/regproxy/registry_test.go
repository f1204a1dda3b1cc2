package regproxy

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/vk-ci/vk/internal/registrytest"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
)

// registryFront puts a token-checking, recording front before the real
// docker-registry (which runs without auth here). The front keeps the
// Host it was addressed by, so the registry builds its upload Locations
// on the front's origin, as a registry addressed directly would.
func registryFront(t *testing.T) *front {
	t.Helper()
	reg := registrytest.New(t)
	target, _ := url.Parse(reg.URL())
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	return newFront(t, jobToken, rp)
}

func guestRepo(t *testing.T, g *guest, name string) *remote.Repository {
	t.Helper()
	return registrytest.Repo(t, Host+"/"+name, g.Client) // the guest has no credential of its own
}

// spec: XFER-18, XFER-20
func TestPushPullThroughProxy(t *testing.T) {
	f := registryFront(t)
	p := mustNew(t, Config{Upstream: f.upstreamURL()})
	g := serve(t, p)
	ctx := t.Context()
	repo := guestRepo(t, g, "tenants/acme/app")

	blob := []byte("a small layer pushed by a job through registry.vk\n")
	layer := ocispec.Descriptor{MediaType: "application/vnd.vk.test.layer", Digest: digest.FromBytes(blob), Size: int64(len(blob))}
	if err := repo.Push(ctx, layer, bytes.NewReader(blob)); err != nil {
		t.Fatalf("push blob through the proxy: %v", err)
	}
	cfg := ocispec.DescriptorEmptyJSON
	if err := repo.Push(ctx, cfg, bytes.NewReader(cfg.Data)); err != nil {
		t.Fatalf("push config: %v", err)
	}
	cfg.Data = nil
	man := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: "application/vnd.vk.test", Config: cfg, Layers: []ocispec.Descriptor{layer}}
	man.SchemaVersion = 2
	mb, _ := json.Marshal(man)
	mdesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(mb), Size: int64(len(mb))}
	if err := repo.PushReference(ctx, mdesc, bytes.NewReader(mb), "v1"); err != nil {
		t.Fatalf("push manifest: %v", err)
	}
	pushes := f.reset()

	// Pull it back through the proxy.
	got, err := repo.Resolve(ctx, "v1")
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if got.Digest != mdesc.Digest {
		t.Fatalf("resolved %s, want %s", got.Digest, mdesc.Digest)
	}
	mgot, err := content.FetchAll(ctx, repo, got)
	if err != nil || !bytes.Equal(mgot, mb) {
		t.Fatalf("fetch manifest = %q, %v; want %q", mgot, err, mb)
	}
	bgot, err := content.FetchAll(ctx, repo.Blobs(), layer)
	if err != nil || !bytes.Equal(bgot, blob) {
		t.Fatalf("fetch blob = %q, %v; want %q", bgot, err, blob)
	}
	pulls := f.reset()

	// The upload went through the proxy: the session the registry opened
	// (202 + Location on its own origin) was continued via registry.vk.
	var methods []string
	for _, r := range pushes {
		methods = append(methods, r.Method+" "+r.Path)
	}
	joined := strings.Join(methods, "\n")
	for _, want := range []string{"POST /v2/tenants/acme/app/blobs/uploads/", "PUT /v2/tenants/acme/app/blobs/uploads/", "PUT /v2/tenants/acme/app/manifests/v1"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the registry never saw %q through the proxy; it saw:\n%s", want, joined)
		}
	}
	if len(pulls) < 3 {
		t.Errorf("the registry saw %d pull requests, want at least resolve, manifest and blob", len(pulls))
	}
	// Every request reaching the registry carried the job's token and
	// never the node's credential (in the upstream URL's user info).
	checkNoNodeCredential(t, append(pushes, pulls...))
	g.checkOnlyProxy()
}

// spec: XFER-18
func TestNodeCredentialNeverForwarded(t *testing.T) {
	f := newFront(t, jobToken, nil)
	p := mustNew(t, Config{Upstream: f.upstreamURL()})
	g := serve(t, p)
	basic := "Basic " + nodeSecretForms[1]
	cases := []struct {
		name   string
		header http.Header
	}{
		{"none", http.Header{}},
		{"guest sends the node's basic auth", http.Header{"Authorization": {basic}}},
		{"guest sends a bearer of its own", http.Header{"Authorization": {"Bearer guest-made-up"}}},
		{"guest sends two authorizations", http.Header{"Authorization": {basic, "Bearer x"}}},
		{"proxy authorization", http.Header{"Proxy-Authorization": {basic}}},
		{"cookie", http.Header{"Cookie": {"session=" + nodeSecret}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.reset()
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, URL+"/v2/acme/app/tags/list", nil)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			resp, err := g.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("status %d, want 200 (the front accepts only the job's token)", resp.StatusCode)
			}
			reqs := f.reset()
			if len(reqs) != 1 {
				t.Fatalf("upstream saw %d requests, want 1", len(reqs))
			}
			checkNoNodeCredential(t, reqs)
			if c := reqs[0].Header.Get("Cookie"); c != "" {
				t.Errorf("guest cookie forwarded: %q", c)
			}
			if reqs[0].Host != strings.TrimPrefix(f.origin(), "http://") {
				t.Errorf("upstream Host = %q, want the registry's own", reqs[0].Host)
			}
		})
	}
}
