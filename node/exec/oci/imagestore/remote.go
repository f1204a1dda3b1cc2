package imagestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Pulls go through go-containerregistry: remote resolves references,
// authenticates (basic or token, as the registry asks), follows an index
// to the image for the platform, and verifies every manifest, config and
// layer against its digest and size; mutate.Extract flattens the layers,
// whiteouts and opaque directories applied, into one tar that extractTar
// writes into the rootfs. What stays ours: which hosts to try (mirrors),
// which scheme each speaks, whose credentials go where, the size bounds on
// documents, and the store's layout.

// credFunc gives the job's credential for a host it names, and none for
// any other host (AUTH-05).
func credFunc(creds []Credential) func(context.Context, string) (authn.AuthConfig, error) {
	return func(_ context.Context, hostport string) (authn.AuthConfig, error) {
		for _, c := range creds {
			h := c.Host
			if i := strings.Index(h, "://"); i >= 0 {
				h = h[i+3:]
			}
			h, _, _ = strings.Cut(h, "/")
			if strings.EqualFold(h, hostport) {
				return authn.AuthConfig{Username: c.Username, Password: c.Password}, nil
			}
		}
		return authn.AuthConfig{}, nil
	}
}

// pull resolves ref at its mirrors or registry and makes sure the image is
// unpacked.
func (s *Store) pull(ctx context.Context, ref Ref, plat Platform, creds []Credential) (*Image, error) {
	var errs []error
	for _, host := range s.cfg.Rules.hosts(ref) {
		im, err := s.pullFrom(ctx, host, ref, plat, creds)
		if err == nil {
			return im, nil
		}
		errs = append(errs, fmt.Errorf("from %s: %w", host, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// remoteOptions are the options of every request to host: the store's
// transport under the scheme rule and the manifest bound, the job's
// credential for that host only, and no retries (a failed host gives way
// to the next one at once, as the mirrors rule wants).
func (s *Store) remoteOptions(ctx context.Context, host string, creds []Credential) []remote.Option {
	base := s.cfg.HTTPClient.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	var auth authn.Authenticator = authn.Anonymous
	if c, _ := credFunc(creds)(ctx, host); c.Username != "" || c.Password != "" {
		auth = authn.FromConfig(c)
	}
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(&hostTransport{base: base, host: host, plain: s.cfg.Rules.plainHTTP(host)}),
		remote.WithAuth(auth),
		remote.WithRetryPredicate(func(error) bool { return false }),
		remote.WithRetryStatusCodes(),
	}
}

// hostTransport holds requests to the registry host to the scheme the
// node's rules give it: plain HTTP only for a host listed in plain_http,
// HTTPS otherwise. go-containerregistry would otherwise speak plain HTTP
// to any loopback or private-address registry, and with it the job's
// credentials. It also bounds a manifest's size.
type hostTransport struct {
	base  http.RoundTripper
	host  string
	plain bool
}

func (t *hostTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.EqualFold(req.URL.Host, t.host) {
		want := "https"
		if t.plain {
			want = "http"
		}
		if req.URL.Scheme != want {
			req = req.Clone(req.Context())
			req.URL.Scheme = want
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && strings.Contains(req.URL.Path, "/manifests/") {
		resp.Body = &boundedBody{ReadCloser: resp.Body, left: maxManifestBytes, what: req.URL.Path}
	}
	return resp, err
}

// boundedBody fails a read past its bound.
type boundedBody struct {
	io.ReadCloser
	left int64
	what string
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, fmt.Errorf("manifest %s larger than %d bytes", b.what, maxManifestBytes)
	}
	return n, err
}

// reference names ref at host.
func (s *Store) reference(host string, ref Ref) (name.Reference, error) {
	var opts []name.Option
	if s.cfg.Rules.plainHTTP(host) {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(host+"/"+ref.Repository, opts...)
	if err != nil {
		return nil, err
	}
	if ref.Digest != "" {
		return repo.Digest(ref.Digest), nil
	}
	return repo.Tag(ref.Tag), nil
}

func (s *Store) pullFrom(ctx context.Context, host string, ref Ref, plat Platform, creds []Credential) (*Image, error) {
	r, err := s.reference(host, ref)
	if err != nil {
		return nil, err
	}
	img, mdigest, err := fetchImage(r, plat, s.remoteOptions(ctx, host, creds))
	if err != nil {
		return nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	if m.SchemaVersion != 2 || m.Config.Digest == (v1.Hash{}) {
		return nil, fmt.Errorf("manifest %s: unsupported format (schema %d, media type %q)", mdigest, m.SchemaVersion, m.MediaType)
	}
	id := m.Config.Digest.String()
	v, err, _ := s.sf.Do(id, func() (any, error) {
		if im, err := s.load(id); err == nil {
			return im, nil
		}
		return s.unpack(img, m, mdigest, plat)
	})
	if err != nil {
		return nil, err
	}
	stored := v.(*Image)
	im := &Image{Ref: ref, Manifest: stored.Manifest, ID: stored.ID, Platform: stored.Platform, Rootfs: stored.Rootfs, Config: stored.Config, Pulled: true}
	if !plat.matches(im.Platform) {
		return nil, fmt.Errorf("image %s is %s, not the requested platform %s", ref, im.Platform, plat)
	}
	rec, _ := json.Marshal(refRecord{Ref: ref.String(), Platform: plat.String(), Manifest: mdigest.String(), ID: id})
	if err := writeAtomic(filepath.Join(s.cfg.Root, "refs", refKey(ref, plat)+".json"), rec, filepath.Join(s.cfg.Root, "tmp")); err != nil {
		return nil, err
	}
	return im, nil
}

// fetchImage resolves r to an image manifest, through an index to the
// entry for plat, and returns the image and its manifest's digest.
func fetchImage(r name.Reference, plat Platform, opts []remote.Option) (v1.Image, v1.Hash, error) {
	desc, err := remote.Get(r, opts...)
	if err != nil {
		var terr *transport.Error
		if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
			return nil, v1.Hash{}, fmt.Errorf("%s: not found: %w", r, err)
		}
		return nil, v1.Hash{}, err
	}
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		return img, desc.Digest, err
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	child, err := pickPlatform(im.Manifests, plat)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	img, err := idx.Image(child.Digest)
	return img, child.Digest, err
}

// pickPlatform chooses an index entry for plat.
func pickPlatform(ms []v1.Descriptor, plat Platform) (v1.Descriptor, error) {
	var have []string
	for _, m := range ms {
		if m.Platform == nil {
			continue
		}
		q := Platform{OS: m.Platform.OS, Architecture: m.Platform.Architecture, Variant: m.Platform.Variant}
		if plat.matches(q) {
			return m, nil
		}
		have = append(have, q.String())
	}
	return v1.Descriptor{}, fmt.Errorf("no image for platform %s (the index has %s)", plat, strings.Join(have, ", "))
}

// unpack fetches the image's config and layers and unpacks them, flattened,
// into images/<id>, atomically.
func (s *Store) unpack(img v1.Image, m *v1.Manifest, mdigest v1.Hash, plat Platform) (*Image, error) {
	if m.Config.Size > maxManifestBytes {
		return nil, fmt.Errorf("config: %s larger than %d bytes", m.Config.Digest, maxManifestBytes)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	stage, err := os.MkdirTemp(filepath.Join(s.cfg.Root, "tmp"), "unpack-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	rootfs := filepath.Join(stage, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return nil, err
	}
	flat := mutate.Extract(img)
	err = extractTar(rootfs, flat)
	flat.Close()
	if err != nil {
		return nil, err
	}
	ic := ImageConfig{Env: cfg.Config.Env, Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd, User: cfg.Config.User, WorkingDir: cfg.Config.WorkingDir}
	for p := range cfg.Config.ExposedPorts {
		ic.ExposedPorts = append(ic.ExposedPorts, p)
	}
	ip := Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	if ip.OS == "" {
		ip = plat // an image without a platform is taken as asked
	}
	id := m.Config.Digest.String()
	rec, _ := json.Marshal(imageRecord{ID: id, Manifest: mdigest.String(), Platform: ip, Config: ic})
	if err := os.WriteFile(filepath.Join(stage, "image.json"), rec, 0o600); err != nil {
		return nil, err
	}
	dst := s.imageDir(id)
	if err := os.Rename(stage, dst); err != nil {
		if _, serr := os.Stat(filepath.Join(dst, "image.json")); serr != nil {
			return nil, err
		}
	}
	if err := os.Chmod(dst, 0o755); err != nil {
		return nil, err
	}
	s.log.Info("image unpacked", slog.String("image", id), slog.Int("layers", len(m.Layers)))
	return s.load(id)
}
