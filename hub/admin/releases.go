package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/vk-ci/vk/hub/api"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/relsign"
)

// Relay updates over the admin socket (OPS-04): publishing a release
// signed off the hub, listing releases, and asking a relay to update.

// Routes of relay updates.
const (
	routeReleasePut  = "PUT /admin/releases/{version}"
	routeReleases    = "GET /admin/releases"
	routeRelayUpdate = "POST /admin/relays/{id}/update"
)

// HeaderReleaseSignature carries a published release's signature
// (base64) on PUT /admin/releases/{version}.
const HeaderReleaseSignature = "vk-release-signature"

// maxReleaseBody bounds a published release's bytes on the admin socket.
const maxReleaseBody = 512 << 20

// Release is one published vk-gitlab release.
type Release struct {
	Version   string    `json:"version"`
	SHA256    string    `json:"sha256"`
	Size      int64     `json:"size"`
	Signature string    `json:"signature"`
	Published time.Time `json:"published"`
}

// UpdateRequest asks a relay to install a published release.
type UpdateRequest struct {
	Release string `json:"release"`
}

// Releases is what relay updates need of the hub; nil in [Config] turns
// the routes off (404).
type Releases interface {
	// Publish stores a release's bytes and signature (made off the hub).
	Publish(ctx context.Context, version, signature string, body io.Reader) (Release, error)
	// List returns the published releases, newest first.
	List(ctx context.Context) ([]Release, error)
	// UpdateRelay sends the update frame for a published release to the
	// relay's session. It fails wrapping [ErrNotFound] for an unknown
	// release or relay, [ErrInvalid] when the relay is not connected or
	// its report does not allow updates.
	UpdateRelay(ctx context.Context, relay, version string) error
	// RelayReleases maps each relay with a report to the release it
	// reported.
	RelayReleases(ctx context.Context) (map[string]string, error)
}

func (s *Server) releases() (Releases, error) {
	if s.cfg.Releases == nil {
		return nil, fmt.Errorf("%w: relay updates are not served by this hub", ErrNotFound)
	}
	return s.cfg.Releases, nil
}

// putRelease serves PUT /admin/releases/{version}: the body is the
// binary, streamed to the release store (not through wrap's bounded
// buffer), the signature in its header.
func (s *Server) putRelease(w http.ResponseWriter, r *http.Request) {
	err := func() error {
		rel, err := s.releases()
		if err != nil {
			return err
		}
		v := r.PathValue("version")
		rec, err := rel.Publish(r.Context(), v, r.Header.Get(HeaderReleaseSignature), http.MaxBytesReader(w, r.Body, maxReleaseBody))
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				return fmt.Errorf("%w: release over %d bytes", ErrInvalid, maxReleaseBody)
			}
			return err
		}
		if err := s.audit(r.Context(), r, "release.publish", v, rec.SHA256); err != nil {
			return err
		}
		s.log.InfoContext(r.Context(), "release published", "release", v, "sha256", rec.SHA256, "size", rec.Size, "actor", actor(r))
		api.WriteJSON(w, http.StatusCreated, rec)
		return nil
	}()
	if err != nil {
		s.writeErr(w, r, routeReleasePut, err)
	}
}

// listReleases serves GET /admin/releases.
func (s *Server) listReleases(w http.ResponseWriter, r *http.Request, _ []byte) error {
	rel, err := s.releases()
	if err != nil {
		return err
	}
	out, err := rel.List(r.Context())
	if err != nil {
		return err
	}
	writeList(w, out)
	return nil
}

// updateRelay serves POST /admin/relays/{id}/update: send the relay the
// update frame, audit.
func (s *Server) updateRelay(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req UpdateRequest
	if err := decode(body, &req); err != nil {
		return err
	}
	rel, err := s.releases()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := rel.UpdateRelay(r.Context(), id, req.Release); err != nil {
		return err
	}
	if err := s.audit(r.Context(), r, "relay.update", id, req.Release); err != nil {
		return err
	}
	s.log.InfoContext(r.Context(), "relay asked to update", logkey.RelayID, id, "release", req.Release, "actor", actor(r))
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// relayReleases fills each relay's reported release, when the hub serves
// updates.
func (s *Server) relayReleases(ctx context.Context, rs []Relay) error {
	if s.cfg.Releases == nil {
		return nil
	}
	m, err := s.cfg.Releases.RelayReleases(ctx)
	if err != nil {
		return err
	}
	for i := range rs {
		rs[i].Release = m[rs[i].ID]
	}
	return nil
}

// PublishRelease uploads a release's bytes with its signature.
func (c *Client) PublishRelease(ctx context.Context, version, signature string, body io.Reader) (Release, error) {
	return get[Release](ctx, c, http.MethodPut, "/admin/releases/"+url.PathEscape(version), signedBody{body, signature}, http.StatusCreated)
}

// Releases lists the published releases, newest first.
func (c *Client) Releases(ctx context.Context) ([]Release, error) {
	return get[[]Release](ctx, c, http.MethodGet, "/admin/releases", nil, http.StatusOK)
}

// UpdateRelay asks a relay to install a published release.
func (c *Client) UpdateRelay(ctx context.Context, relay, version string) error {
	return c.do(ctx, http.MethodPost, "/admin/relays/"+url.PathEscape(relay)+"/update", UpdateRequest{Release: version}, http.StatusAccepted, nil)
}

// signedBody is a release upload: its bytes and the signature header.
type signedBody struct {
	r   io.Reader
	sig string
}

// releaseCmds are the relays subcommands of updates: publish, releases,
// update, and the two that run off the hub, sign-key and sign.
func releaseCmds(cl func() *Client) []*cobra.Command {
	var sigFile, release string
	publish := &cobra.Command{
		Use:   "publish --release VERSION --signature FILE <vk-gitlab binary>",
		Short: "store a vk-gitlab release signed off the hub, for relays update",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sig, err := os.ReadFile(sigFile)
			if err != nil {
				return fmt.Errorf("--signature: %w", err)
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			rec, err := cl().PublishRelease(cmd.Context(), release, strings.TrimSpace(string(sig)), f)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "release %s published: %d bytes, sha256 %s\n", rec.Version, rec.Size, rec.SHA256)
			return nil
		},
	}
	publish.Flags().StringVar(&release, "release", "", "the release's version, as `vk-gitlab --version` prints it (required)")
	publish.Flags().StringVar(&sigFile, "signature", "", "the signature file `vk-hub relays sign` wrote (required)")
	_ = publish.MarkFlagRequired("release")
	_ = publish.MarkFlagRequired("signature")

	list := &cobra.Command{
		Use: "releases", Short: "list the published vk-gitlab releases", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rs, err := cl().Releases(cmd.Context())
			if err != nil {
				return err
			}
			t := table(cmd.OutOrStdout())
			fmt.Fprintln(t, "RELEASE\tSIZE\tSHA256\tPUBLISHED")
			for _, r := range rs {
				fmt.Fprintf(t, "%s\t%d\t%s\t%s\n", r.Version, r.Size, r.SHA256, stamp(r.Published))
			}
			return t.Flush()
		},
	}
	update := &cobra.Command{
		Use:   "update <relay-id> <release>",
		Short: "ask a relay whose [hub] allow lists update to install a published release",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cl().UpdateRelay(cmd.Context(), args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "relay %s asked to install %s; `vk-hub relays list` shows its release once it is back\n", args[0], args[1])
			return nil
		},
	}
	return []*cobra.Command{publish, list, update, signKeyCmd(), signCmd()}
}

// signKeyCmd writes a new release key pair; it runs anywhere, off the hub.
func signKeyCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "sign-key --out NAME",
		Short: "make a release key pair: NAME.key (keep it off the hub) and NAME.pub (each relay's release_key_file); runs without a hub",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pub, priv, err := relsign.GenerateKey()
			if err != nil {
				return err
			}
			if err := writeNew(out+".key", priv, 0o600); err != nil {
				return err
			}
			if err := writeNew(out+".pub", pub, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s.key (private: keep it off the hub) and %s.pub (install as each relay's [hub] release_key_file)\n", out, out)
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "vk-release", "path prefix of the two key files")
	return c
}

// signCmd signs a release with the private key; it runs off the hub.
func signCmd() *cobra.Command {
	var keyFile, release, out string
	c := &cobra.Command{
		Use:   "sign --key NAME.key --release VERSION [--out FILE] <vk-gitlab binary>",
		Short: "sign a vk-gitlab release with the release key (writes BINARY.sig); runs without a hub",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kb, err := os.ReadFile(keyFile)
			if err != nil {
				return fmt.Errorf("--key: %w", err)
			}
			priv, err := relsign.ParsePrivateKey(kb)
			if err != nil {
				return fmt.Errorf("--key %s: %w", keyFile, err)
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			sum, n, err := relsign.Digest(f)
			if err != nil {
				return err
			}
			out = cmp.Or(out, args[0]+".sig")
			if err := os.WriteFile(out, []byte(relsign.Sign(priv, release, sum)+"\n"), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "signed %s release %s (%d bytes, sha256 %s) into %s\n", args[0], release, n, sum, out)
			return nil
		},
	}
	c.Flags().StringVar(&keyFile, "key", "", "the private release key (required)")
	c.Flags().StringVar(&release, "release", "", "the release's version, as `vk-gitlab --version` prints it (required)")
	c.Flags().StringVar(&out, "out", "", "signature file (default BINARY.sig)")
	_ = c.MarkFlagRequired("key")
	_ = c.MarkFlagRequired("release")
	return c
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
