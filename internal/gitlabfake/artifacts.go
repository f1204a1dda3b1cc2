package gitlabfake

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
)

// StoredArtifact is one uploaded artifact of a job.
type StoredArtifact struct {
	// Filename is the multipart part's filename (e.g. "coverage.zip").
	Filename string
	// Type (artifact_type, default "archive"), Format (artifact_format,
	// default "zip") and ExpireIn (expire_in) come from the query.
	Type, Format, ExpireIn string
	// Data is the uploaded content.
	Data []byte
	// ViaObjectStorage is true when the bytes arrived at the object-storage
	// listener after a 307.
	ViaObjectStorage bool
}

// objectUpload is a pending redirected upload (or a download link).
type objectUpload struct {
	jobID    int64
	query    url.Values
	download bool
}

func (s *Server) maxArtifactSize() int64 {
	if s.opts.MaxArtifactSize > 0 {
		return s.opts.MaxArtifactSize
	}
	return 100 << 20
}

// handleArtifactUpload serves POST /jobs/:id/artifacts (multipart field
// "file"; query artifact_format, artifact_type, expire_in). 201 on
// success; with ArtifactRedirect a 307 to object storage. Uploading the
// same artifact_type again replaces it.
func (s *Server) handleArtifactUpload(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	j := s.jobForTokenLocked(w, r, "")
	if j == nil {
		s.mu.Unlock()
		return
	}
	if !j.executing() {
		w.Header().Set("Job-Status", string(j.state))
		s.mu.Unlock()
		forbidden(w, "Job is not processing on runner")
		return
	}
	if s.opts.ArtifactRedirect {
		key := randHex(16)
		s.objects[key] = &objectUpload{jobID: j.id, query: r.URL.Query()}
		loc := s.objURL + "/objects/" + key
		s.mu.Unlock()
		// Drain so the client's body write does not fail before it sees the 307.
		io.Copy(io.Discard, io.LimitReader(r.Body, s.maxArtifactSize()+1<<20))
		w.Header().Set("Location", loc)
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	id := j.id
	s.mu.Unlock()
	s.storeUpload(w, r, id, r.URL.Query(), false)
}

// storeUpload reads the multipart "file" part and stores it on job id.
func (s *Server) storeUpload(w http.ResponseWriter, r *http.Request, id int64, q url.Values, viaObj bool) {
	if r.ContentLength > s.maxArtifactSize()+1<<20 {
		writeMessage(w, http.StatusRequestEntityTooLarge, "413 Request Entity Too Large")
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		writeMessage(w, http.StatusBadRequest, "400 Bad request - "+err.Error())
		return
	}
	var art *StoredArtifact
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeMessage(w, http.StatusBadRequest, "400 Bad request - "+err.Error())
			return
		}
		if part.FormName() != "file" {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(part, s.maxArtifactSize()+1))
		if err != nil {
			writeMessage(w, http.StatusBadRequest, "400 Bad request - "+err.Error())
			return
		}
		if int64(len(data)) > s.maxArtifactSize() {
			writeMessage(w, http.StatusRequestEntityTooLarge, "413 Request Entity Too Large")
			return
		}
		art = &StoredArtifact{Filename: part.FileName(), Type: q.Get("artifact_type"), Format: q.Get("artifact_format"), ExpireIn: q.Get("expire_in"), Data: data, ViaObjectStorage: viaObj}
		break
	}
	if art == nil {
		writeMessage(w, http.StatusBadRequest, `400 Bad request - "file" not given`)
		return
	}
	if art.Type == "" {
		art.Type = "archive"
	}
	if art.Format == "" {
		art.Format = "zip"
	}
	s.mu.Lock()
	j := s.jobs[id]
	replaced := false
	for i := range j.artifacts {
		if j.artifacts[i].Type == art.Type {
			j.artifacts[i], replaced = *art, true
		}
	}
	if !replaced {
		j.artifacts = append(j.artifacts, *art)
	}
	s.notifyLocked()
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d}`, id)
}

// handleArtifactDownload serves GET /jobs/:id/artifacts: the archive
// artifact of job id. The JOB-TOKEN must be the token of a running job of
// the same project (what newer Rails puts in dependencies[].token), or,
// with LegacyDependencyTokens, job id's own token even after it ended.
// 401 for a token that authenticates no job, 403 for one that may not
// read the job, 404 without an archive. With
// ArtifactRedirect and ?direct_download=true it answers 302 to object
// storage. Idempotent.
func (s *Server) handleArtifactDownload(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	s.mu.Lock()
	j := s.jobs[id]
	if err != nil || j == nil {
		s.mu.Unlock()
		writeMessage(w, http.StatusNotFound, "404 Not Found")
		return
	}
	tok := r.Header.Get("Job-Token")
	if tok == "" {
		tok = r.URL.Query().Get("job_token")
	}
	var reader *job // the job whose token authenticates the request
	for _, o := range s.jobs {
		if o.token == tok && (o.executing() || (s.opts.LegacyDependencyTokens && o == j)) {
			reader = o
			break
		}
	}
	switch {
	case reader == nil:
		s.mu.Unlock()
		writeMessage(w, http.StatusUnauthorized, "401 Unauthorized")
		return
	case reader.pipeline.project != j.pipeline.project:
		s.mu.Unlock()
		forbidden(w, "")
		return
	}
	a := j.archive()
	if a == nil {
		s.mu.Unlock()
		writeMessage(w, http.StatusNotFound, "404 Not Found")
		return
	}
	if s.opts.ArtifactRedirect && r.URL.Query().Get("direct_download") == "true" {
		key := randHex(16)
		s.objects[key] = &objectUpload{jobID: id, download: true}
		loc := s.objURL + "/objects/" + key
		s.mu.Unlock()
		http.Redirect(w, r, loc, http.StatusFound)
		return
	}
	data, name := a.Data, a.Filename
	s.mu.Unlock()
	serveArtifact(w, name, data)
}

func serveArtifact(w http.ResponseWriter, name string, data []byte) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	w.Write(data)
}

// objectHandler serves the object-storage listener: POST /objects/{key}
// completes a redirected upload, GET /objects/{key} a direct download.
// Keys are single-use; no job token is needed (or wanted) here.
func (s *Server) objectHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(string(RouteObjectStore), s.wrap(RouteObjectStore, func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		o := s.objects[r.PathValue("key")]
		delete(s.objects, r.PathValue("key"))
		var data []byte
		var name string
		if o != nil && o.download && r.Method == http.MethodGet {
			if a := s.jobs[o.jobID].archive(); a != nil {
				data, name = a.Data, a.Filename
			}
		}
		s.mu.Unlock()
		switch {
		case o == nil:
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>`)
		case o.download && r.Method == http.MethodGet:
			serveArtifact(w, name, data)
		case !o.download && r.Method == http.MethodPost:
			s.storeUpload(w, r, o.jobID, o.query, true)
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	}))
	return mux
}
