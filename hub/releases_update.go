package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/api"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
)

// relayUpdates is the hub's side of relay updates (OPS-04): the release
// store behind the admin socket, the UI's button and the download route,
// and the driver that sends update frames. It implements admin.Releases
// and api.Releases.
type relayUpdates struct {
	rs *releaseStore
	d  *Driver
}

var (
	_ admin.Releases = relayUpdates{}
	_ api.Releases   = relayUpdates{}
)

func (u relayUpdates) Publish(ctx context.Context, version, signature string, body io.Reader) (admin.Release, error) {
	return u.rs.Publish(ctx, version, signature, body)
}

func (u relayUpdates) List(ctx context.Context) ([]admin.Release, error) { return u.rs.List(ctx) }

// UpdateRelay sends relay the update frame of a published release whose
// bytes this instance holds: only while the relay's session is up and
// its last report's allow lists update.
func (u relayUpdates) UpdateRelay(ctx context.Context, relay, version string) error {
	f, rec, err := u.rs.Open(ctx, version)
	if errors.Is(err, errReleaseNotHere) {
		return fmt.Errorf("%w: %w", admin.ErrInvalid, err)
	}
	if err != nil {
		return err
	}
	f.Close()
	path := "/v1/releases/" + url.PathEscape(version) + "/vk-gitlab"
	frame := client.Update{Release: rec.Version, URL: path, SHA256: rec.SHA256, Size: rec.Size, Signature: rec.Signature}
	r := &relayUpdateReq{relay: relay, u: frame}
	return u.d.call(ctx, r)
}

// RelayReleases maps each relay with a report to its reported release.
func (u relayUpdates) RelayReleases(ctx context.Context) (map[string]string, error) {
	r := &relayReleasesReq{}
	if err := u.d.ask(ctx, r); err != nil {
		return nil, err
	}
	return r.releases, nil
}

// OpenRelease implements api.Releases for GET /v1/releases/<v>/vk-gitlab.
func (u relayUpdates) OpenRelease(ctx context.Context, version string) (*os.File, string, error) {
	f, rec, err := u.rs.Open(ctx, version)
	switch {
	case errors.Is(err, errReleaseNotHere):
		return nil, "", api.Errorf(client.CodeNotFound, "%v", err)
	case errors.Is(err, admin.ErrNotFound), errors.Is(err, admin.ErrInvalid):
		return nil, "", &api.Error{Status: http.StatusNotFound, Code: client.CodeNotFound, Msg: "release " + version + " is not published on this hub", Err: err}
	case err != nil:
		return nil, "", err
	}
	return f, rec.SHA256, nil
}

// relayUpdateReq asks the owner loop to send an update frame.
type relayUpdateReq struct {
	reply
	relay string
	u     client.Update
}

func (r *relayUpdateReq) run(d *Driver) { r.err = d.sendUpdate(r.relay, r.u) }

// relayReleasesReq asks the owner loop for every relay's reported release.
type relayReleasesReq struct{ releases map[string]string }

func (r *relayReleasesReq) run(d *Driver) {
	r.releases = make(map[string]string, len(d.relays))
	for name, rel := range d.relays {
		if rel.report != nil {
			r.releases[name] = rel.report.Release
		}
	}
}

// sendUpdate sends u on relay's session when its report allows updates.
func (d *Driver) sendUpdate(relay string, u client.Update) error {
	r := d.relays[relay]
	switch {
	case r == nil || !r.up || r.send == nil:
		return fmt.Errorf("%w: relay %s has no session: it must be running and connected to be updated", admin.ErrInvalid, relay)
	case r.report == nil:
		return fmt.Errorf("%w: relay %s has not sent its report yet; try again in a moment", admin.ErrInvalid, relay)
	case !slices.Contains(r.report.Allow, client.RelayAllowUpdate):
		return fmt.Errorf("%w: relay %s does not allow updates from the hub: add \"update\" to its [hub] allow (release %s reports none)",
			admin.ErrInvalid, relay, r.report.Release)
	}
	if err := r.send.Send(&u); err != nil {
		return fmt.Errorf("%w: relay %s: %v (a relay before session version 3 cannot be updated from the hub)", admin.ErrInvalid, relay, err)
	}
	d.log.Info("update sent to relay", logkey.RelayID, relay, "release", u.Release, "from", r.report.Release)
	return nil
}
