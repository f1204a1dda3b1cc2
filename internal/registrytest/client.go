package registrytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// ArtifactType is the artifact type of what [PushArtifact] pushes.
const ArtifactType = "application/vnd.vk.test"

// NewWithSigningKey starts a registry under token authentication for
// service and issuer that trusts a new [SigningKey], and returns it with
// the key's files: what a token issuer needs to sign tokens the registry
// accepts.
func NewWithSigningKey(t testing.TB, service, issuer string) (r *Registry, keyFile, certFile string) {
	t.Helper()
	keyFile, certFile = SigningKey(t)
	r = NewWithTokenAuth(t, TokenAuth{Service: service, Issuer: issuer, RootCertBundle: certFile})
	return r, keyFile, certFile
}

// Repository is repository name on r for oras, sending bearer token
// tok with every request.
func (r *Registry) Repository(t testing.TB, name, tok string) *remote.Repository {
	t.Helper()
	return Repo(t, r.Addr+"/"+name, &auth.Client{Client: http.DefaultClient,
		Credential: auth.StaticCredential(r.Addr, auth.Credential{AccessToken: tok})})
}

// Repo is repository ref ("host[:port]/name") for oras over plain HTTP
// through client, without the referrers API (the registry has none).
// It is for a registry reached some other way than [Registry.Addr], such
// as through a proxy.
func Repo(t testing.TB, ref string, client remote.Client) *remote.Repository {
	t.Helper()
	repo, err := remote.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP, repo.Client = true, client
	repo.SetReferrersCapability(false)
	return repo
}

// Blob is the descriptor of body as an opaque blob.
func Blob(body []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(body), Size: int64(len(body))}
}

// PushArtifact uploads body as a blob and tags, as tag, a manifest of
// [ArtifactType] whose one layer it is (with the empty config).
func PushArtifact(ctx context.Context, repo *remote.Repository, tag string, body []byte) error {
	blob := Blob(body)
	if err := repo.Push(ctx, blob, bytes.NewReader(body)); err != nil {
		return err
	}
	cfg := ocispec.DescriptorEmptyJSON
	if err := repo.Push(ctx, cfg, bytes.NewReader(cfg.Data)); err != nil {
		return err
	}
	man, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType, Config: cfg, Layers: []ocispec.Descriptor{blob}})
	mdesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(man), Size: int64(len(man))}
	return repo.PushReference(ctx, mdesc, bytes.NewReader(man), tag)
}

// PullArtifact resolves tag and reads back the first layer of its
// manifest: what [PushArtifact] pushed.
func PullArtifact(ctx context.Context, repo *remote.Repository, tag string) ([]byte, error) {
	_, rc, err := repo.FetchReference(ctx, tag)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var man ocispec.Manifest
	if err := json.NewDecoder(rc).Decode(&man); err != nil {
		return nil, err
	}
	if len(man.Layers) == 0 {
		return nil, errors.New("registrytest: the manifest of " + tag + " has no layer")
	}
	brc, err := repo.Fetch(ctx, man.Layers[0])
	if err != nil {
		return nil, err
	}
	defer brc.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(brc)
	return b.Bytes(), err
}

// Status is the HTTP status of the registry's refusal in err (as oras
// returns it), 0 for any other error or none.
func Status(err error) int {
	var er *errcode.ErrorResponse
	if errors.As(err, &er) {
		return er.StatusCode
	}
	return 0
}

// Refused reports whether err is the registry's own 401 or 403.
func Refused(err error) bool {
	s := Status(err)
	return s == http.StatusUnauthorized || s == http.StatusForbidden
}
