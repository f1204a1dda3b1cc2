package api

import (
	"context"
	"net/http"
	"os"

	"github.com/vk-ci/vk/proto/client"
)

// HeaderReleaseSHA256 is the hex SHA-256 of a release download.
const HeaderReleaseSHA256 = "vk-release-sha256"

// Releases opens published vk-gitlab releases for GET
// /v1/releases/{version}/vk-gitlab (OPS-04). OpenRelease returns the
// bytes and their hex SHA-256, or an *Error (404 for a release not
// published, or not held by this hub instance).
type Releases interface {
	OpenRelease(ctx context.Context, version string) (*os.File, string, error)
}

// releaseGet serves GET /v1/releases/{version}/vk-gitlab: the signed request
// of an enrolled relay (the signature check is the same as every route's;
// nodes and operators have no access), answered with the release's bytes.
func (a *API) releaseGet(w http.ResponseWriter, r *http.Request, _ Principal, _ []byte) error {
	if a.cfg.Releases == nil {
		return Errorf(client.CodeNotFound, "this hub serves no releases")
	}
	f, sum, err := a.cfg.Releases.OpenRelease(r.Context(), r.PathValue("version"))
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(HeaderReleaseSHA256, sum)
	http.ServeContent(w, r, "vk-gitlab", fi.ModTime(), f)
	return nil
}
