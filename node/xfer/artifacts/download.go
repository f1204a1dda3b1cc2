package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/vk-ci/vk/node/xfer/fileset"
)

// Dependency is one job whose artifacts this job downloads.
type Dependency struct {
	ID int64 // the dependency's GitLab job id
	// Token is the dependency's own token; it is used for this download
	// only (AUTH-04).
	Token string
	Name  string // job name, for the trace
}

var (
	// ErrNotFound is returned (wrapped) for 404: the job has no artifacts.
	ErrNotFound = errors.New("artifacts: not found")
	// ErrForbidden is returned (wrapped) for 401 and 403.
	ErrForbidden = errors.New("artifacts: forbidden")
)

// DownloadRequest is everything one download_artifacts stage needs.
type DownloadRequest struct {
	// Dependencies are downloaded in order.
	Dependencies []Dependency
	// Dir is the build dir the archives are extracted into.
	Dir string
	// TempDir holds each zip while it downloads ("" = os.TempDir()); it
	// should be on the job's disk.
	TempDir string
	// Trace receives gitlab-runner-like lines; nil discards.
	Trace io.Writer
}

// Download fetches each dependency's artifacts zip with that dependency's
// token and extracts it into req.Dir. It stops at the first failure and
// returns it; the stage fails then (FAIL-06). 404 is a failure too, as in
// gitlab-runner (a dependency without artifacts_file is skipped by the
// caller).
func (c *Client) Download(ctx context.Context, req DownloadRequest) error {
	tr := req.Trace
	if tr == nil {
		tr = io.Discard
	}
	for _, d := range req.Dependencies {
		fmt.Fprintf(tr, "Downloading artifacts for %s (%d)...\n", d.Name, d.ID)
		status, err := c.downloadOne(ctx, req, d)
		tok := ""
		if s := shortToken(d.Token); s != "" {
			tok = " token=" + s
		}
		if err != nil {
			st := ""
			if status != 0 {
				st = fmt.Sprintf(" responseStatus=%d %s", status, http.StatusText(status))
			}
			fmt.Fprintf(tr, "\x1b[31;1mERROR: Downloading artifacts from coordinator... error  id=%d%s%s: %v\x1b[0;m\n", d.ID, st, tok, err)
			return fmt.Errorf("artifacts: dependency %s (%d): %w", d.Name, d.ID, err)
		}
		fmt.Fprintf(tr, "Downloading artifacts from coordinator... ok  id=%d responseStatus=%d %s%s\n", d.ID, status, http.StatusText(status), tok)
	}
	return nil
}

func (c *Client) downloadOne(ctx context.Context, req DownloadRequest, d Dependency) (int, error) {
	u, err := c.endpoint(d.ID, nil)
	if err != nil {
		return 0, err
	}
	hc, err := c.httpClient()
	if err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(req.TempDir, "vk-artifacts-*.zip")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	var status int
	for attempt := 1; ; attempt++ {
		status, err = c.fetch(ctx, hc, u.String(), d.Token, tmp)
		if err == nil || attempt >= maxAttemptsOther || ctx.Err() != nil ||
			errors.Is(err, ErrNotFound) || errors.Is(err, ErrForbidden) || errors.Is(err, fileset.ErrTooLarge) || errors.Is(err, ErrInsecureRedirect) {
			break
		}
		if err := sleep(ctx, c.Clock, otherRetryDelay); err != nil {
			return status, err
		}
	}
	if err != nil {
		return status, err
	}
	x := &fileset.Extractor{Root: req.Dir, MaxBytes: c.archiveCap()}
	if _, err := ExtractZip(ctx, tmp.Name(), x); err != nil {
		return status, err
	}
	return status, nil
}

func (c *Client) fetch(ctx context.Context, hc *http.Client, u, token string, dst *os.File) (int, error) {
	if _, err := dst.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	if err := dst.Truncate(0); err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("JOB-TOKEN", token)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer drain(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return resp.StatusCode, ErrNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		return resp.StatusCode, ErrForbidden
	default:
		return resp.StatusCode, fmt.Errorf("%w: %d %s", ErrStatus, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	_, err = io.Copy(&fileset.CapWriter{W: dst, N: c.archiveCap()}, resp.Body)
	return resp.StatusCode, err
}
