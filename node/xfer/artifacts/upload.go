package artifacts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/xfer/fileset"
)

// ErrUploadFailed is returned (wrapped) by [Failures] when an upload ended
// failed or too_large; the job then fails external_dependency (FAIL-06).
var ErrUploadFailed = errors.New("artifacts: upload failed")

// Failures returns an error wrapping [ErrUploadFailed] naming every
// artifact whose outcome is failed or too_large, or nil.
func Failures(rs []Result) error {
	var bad []string
	for _, r := range rs {
		if r.Outcome == Failed || r.Outcome == TooLarge {
			n := r.Name
			if n == "" {
				n = "default"
			}
			bad = append(bad, fmt.Sprintf("%s (%s, %s)", n, r.Type, r.Outcome))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUploadFailed, strings.Join(bad, ", "))
}

// Outcome is what became of one artifact upload; the node reports it in
// the result and the trace (XFER-05).
type Outcome string

// Outcomes, as named in the result message.
const (
	Uploaded Outcome = "uploaded"  // GitLab answered 201
	Skipped  Outcome = "skipped"   // `when` excluded it, or nothing matched
	TooLarge Outcome = "too_large" // GitLab answered 413, or over the 10 GiB cap
	Failed   Outcome = "failed"    // anything else, after retries
)

// Spec is one entry of the job's artifacts list.
type Spec struct {
	Name      string   // file name stem; "" means "default"
	Paths     []string // glob patterns relative to the build dir
	Exclude   []string // glob patterns dropped from the selection
	Untracked bool     // add `git ls-files --others`
	// When is on_success (the default for ""), on_failure or always.
	When string
	// Type is GitLab's artifact_type ("" lets GitLab default to archive).
	Type string
	// Format is zip ("" = zip), gzip or raw.
	Format string
	// ExpireIn is passed through as the expire_in query ("" = omitted).
	ExpireIn string
}

// Result is the outcome of one upload.
type Result struct {
	Name    string  // the Spec's Name
	Type    string  // the Spec's Type, "archive" when empty
	Outcome Outcome // never empty
	// Status is the last HTTP status seen, 0 when none.
	Status int
	// ID is GitLab's artifact id from a 201 body, when it sent one ("" otherwise).
	ID string
	// Bytes is the size of the archive sent in the last attempt (0 when
	// none was sent).
	Bytes int64
	// Err explains Failed and TooLarge; nil otherwise.
	Err error
}

// UploadRequest is everything one upload_artifacts stage needs.
type UploadRequest struct {
	JobID int64
	// Token is the job token (CI_JOB_TOKEN), sent as JOB-TOKEN to GitLab's
	// origin only.
	Token string
	// Dir is the build dir the patterns are relative to.
	Dir string
	// JobFailed selects on_failure instead of on_success artifacts.
	JobFailed bool
	// Artifacts are uploaded in order.
	Artifacts []Spec
	// Trace receives gitlab-runner-like progress lines; nil discards.
	Trace io.Writer
}

// Upload runs the upload_artifacts stage: for each artifact whose `when`
// fits the job's state (see [WhenMatches]) it selects files, archives them
// into the multipart body and POSTs it, then writes the outcome to the
// trace. The stage's section title ("Uploading artifacts for successful
// job") is the stage runner's. It returns one
// Result per artifact, in order, skipped ones included. It never returns
// early on a failed artifact.
func (c *Client) Upload(ctx context.Context, req UploadRequest) []Result {
	tr := req.Trace
	if tr == nil {
		tr = io.Discard
	}
	var out []Result
	for _, a := range req.Artifacts {
		res := Result{Name: a.Name, Type: a.Type}
		if res.Type == "" {
			res.Type = "archive"
		}
		if !WhenMatches(a.When, req.JobFailed) {
			res.Outcome = Skipped
			out = append(out, res)
			continue
		}
		res = c.uploadOne(ctx, req, a, res, tr)
		c.log().Debug("artifact upload", logkey.GitLabJobID, req.JobID, "name", a.Name, "outcome", res.Outcome, logkey.Status, res.Status)
		out = append(out, res)
	}
	return out
}

// WhenMatches reports whether an artifact with `when` is uploaded after a
// job that failed (or not): on_success ("" too), on_failure, always.
func WhenMatches(when string, failed bool) bool {
	switch when {
	case "always":
		return true
	case "on_failure":
		return failed
	default:
		return !failed
	}
}

func (c *Client) uploadOne(ctx context.Context, req UploadRequest, a Spec, res Result, tr io.Writer) Result {
	fmt.Fprintln(tr, "Uploading artifacts...")
	format, err := normFormat(a.Format)
	if err != nil {
		return failWith(tr, res, err)
	}
	entries, warns, err := fileset.Collect(ctx, req.Dir, fileset.Spec{Paths: a.Paths, Exclude: a.Exclude, Untracked: a.Untracked})
	if err != nil {
		return failWith(tr, res, err)
	}
	for _, w := range warns {
		fmt.Fprintf(tr, "\x1b[0;33mWARNING: %s\x1b[0;m\n", w)
	}
	if a.Untracked {
		fmt.Fprintf(tr, "untracked: found %d files\n", countFiles(entries))
	}
	for _, p := range a.Paths {
		n := 0
		for _, e := range entries {
			if ok, _ := fileset.Match(p, e.Path); ok {
				n++
			}
		}
		if n > 0 {
			fmt.Fprintf(tr, "%s: found %d matching artifact files and directories\n", p, n)
		}
	}
	if len(entries) == 0 {
		fmt.Fprintln(tr, "\x1b[0;33mWARNING: No files to upload\x1b[0;m")
		res.Outcome = Skipped
		return res
	}
	var rawPath string
	if format == FormatRaw {
		var files []fileset.Entry
		for _, e := range entries {
			if e.Mode.IsRegular() {
				files = append(files, e)
			}
		}
		if len(files) != 1 {
			return failWith(tr, res, fmt.Errorf("%w (found %d)", ErrRawNeedsOneFile, len(files)))
		}
		rawPath = filepath.Join(req.Dir, filepath.FromSlash(files[0].Path))
	}
	q := url.Values{}
	q.Set("artifact_format", string(format))
	if a.Type != "" {
		q.Set("artifact_type", a.Type)
	}
	if a.ExpireIn != "" {
		q.Set("expire_in", a.ExpireIn)
	}
	u, err := c.endpoint(req.JobID, q)
	if err != nil {
		return failWith(tr, res, err)
	}
	boundary := newBoundary()
	var sent atomic.Int64
	body := func() (io.ReadCloser, string, *error) {
		return c.multipartBody(ctx, boundary, fileName(a.Name, format), &sent, func(w io.Writer) error {
			switch format {
			case FormatZip:
				return WriteZip(ctx, w, req.Dir, entries)
			case FormatGzip:
				return WriteGzip(ctx, w, req.Dir, entries)
			default:
				return copyFile(w, rawPath)
			}
		})
	}
	status, id, err := c.post(ctx, u, req.Token, body)
	res.Status, res.ID, res.Bytes = status, id, sent.Load()
	prefix := fmt.Sprintf("Uploading artifacts as %q to coordinator...", res.Type)
	tok := ""
	if s := shortToken(req.Token); s != "" {
		tok = " token=" + s
	}
	switch {
	case err == nil:
		res.Outcome = Uploaded
		fmt.Fprintf(tr, "%s %d %s  id=%d responseStatus=%d %s%s\n", prefix, status, http.StatusText(status), req.JobID, status, http.StatusText(status), tok)
	case errors.Is(err, fileset.ErrTooLarge) || status == http.StatusRequestEntityTooLarge:
		res.Outcome, res.Err = TooLarge, err
		fmt.Fprintf(tr, "\x1b[31;1mERROR: %s too large archive  id=%d responseStatus=%d %s status=%d%s\x1b[0;m\n", prefix, req.JobID, status, http.StatusText(status), status, tok)
	default:
		res.Outcome, res.Err = Failed, err
		st := ""
		if status != 0 {
			st = fmt.Sprintf(" responseStatus=%d %s", status, http.StatusText(status))
		}
		fmt.Fprintf(tr, "\x1b[31;1mERROR: %s failed  id=%d%s%s: %v\x1b[0;m\n", prefix, req.JobID, st, tok, err)
	}
	return res
}

func countFiles(es []fileset.Entry) int {
	n := 0
	for _, e := range es {
		if !e.Mode.IsDir() {
			n++
		}
	}
	return n
}

func failWith(tr io.Writer, res Result, err error) Result {
	res.Outcome, res.Err = Failed, err
	fmt.Fprintf(tr, "\x1b[31;1mERROR: Uploading artifacts as %q failed: %v\x1b[0;m\n", res.Type, err)
	return res
}

// multipartBody returns a streaming multipart body with a single part
// "file" written by fill, its content type, and a pointer to the error fill
// ended with (valid once the body reached EOF or failed).
func (c *Client) multipartBody(ctx context.Context, boundary, filename string, sent *atomic.Int64, fill func(io.Writer) error) (io.ReadCloser, string, *error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	mw.SetBoundary(boundary)
	errp := new(error)
	var once sync.Once
	go func() {
		err := func() error {
			part, err := mw.CreateFormFile("file", filename)
			if err != nil {
				return err
			}
			cw := &fileset.CapWriter{W: part, N: c.archiveCap()}
			err = fill(cw)
			sent.Store(c.archiveCap() - cw.N)
			if err != nil {
				return err
			}
			return mw.Close()
		}()
		once.Do(func() { *errp = err })
		pw.CloseWithError(err)
	}()
	return pr, mw.FormDataContentType(), errp
}

// post sends the upload with retries; it returns the final status, the
// artifact id from the body, and nil only on 201.
func (c *Client) post(ctx context.Context, u *url.URL, token string, body func() (io.ReadCloser, string, *error)) (int, string, error) {
	hc, err := c.httpClient()
	if err != nil {
		return 0, "", err
	}
	attempts503, attemptsOther := 0, 0
	for {
		rc, ctype, archErr := body()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), rc)
		if err != nil {
			rc.Close()
			return 0, "", err
		}
		req.GetBody = func() (io.ReadCloser, error) {
			// A 307 re-sends the body: regenerate the stream (same
			// boundary, so the content type still holds).
			nrc, _, nerr := body()
			archErr = nerr
			return nrc, nil
		}
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("JOB-TOKEN", token)
		resp, err := hc.Do(req)
		if err != nil {
			rc.Close()
			if *archErr != nil && !errors.Is(*archErr, io.ErrClosedPipe) {
				return 0, "", *archErr
			}
			if errors.Is(err, ErrInsecureRedirect) || errors.Is(err, ErrTooManyRedirects) || ctx.Err() != nil {
				return 0, "", err
			}
			attemptsOther++
			if attemptsOther >= maxAttemptsOther {
				return 0, "", err
			}
			if err := sleep(ctx, c.Clock, otherRetryDelay); err != nil {
				return 0, "", err
			}
			continue
		}
		status := resp.StatusCode
		switch {
		case status == http.StatusCreated:
			id := readID(resp.Body)
			drain(resp.Body)
			return status, id, nil
		case status == http.StatusServiceUnavailable:
			wait := retryAfter(resp.Header.Get("Retry-After"), clock.Or(c.Clock).Now())
			drain(resp.Body)
			attempts503++
			if attempts503 >= maxAttempts503 {
				return status, "", fmt.Errorf("%w: %d %s", ErrStatus, status, http.StatusText(status))
			}
			if err := sleep(ctx, c.Clock, wait); err != nil {
				return status, "", err
			}
		case status == http.StatusInternalServerError || status == http.StatusBadGateway || status == http.StatusGatewayTimeout:
			drain(resp.Body)
			attemptsOther++
			if attemptsOther >= maxAttemptsOther {
				return status, "", fmt.Errorf("%w: %d %s", ErrStatus, status, http.StatusText(status))
			}
			if err := sleep(ctx, c.Clock, otherRetryDelay); err != nil {
				return status, "", err
			}
		default:
			msg := readMessage(resp.Body)
			drain(resp.Body)
			return status, "", fmt.Errorf("%w: %d %s%s", ErrStatus, status, http.StatusText(status), msg)
		}
	}
}

func newBoundary() string {
	var b [24]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// readID pulls "id" out of a small JSON body, best effort.
func readID(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 4096))
	s := string(b)
	i := strings.Index(s, `"id":`)
	if i < 0 {
		return ""
	}
	s = strings.TrimLeft(s[i+5:], " \"")
	j := strings.IndexAny(s, ",}\"")
	if j < 0 {
		return ""
	}
	return s[:j]
}

func readMessage(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 512))
	s := strings.TrimSpace(string(b))
	if s == "" {
		return ""
	}
	return ": " + s
}
