package gitlabfake

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Route names one endpoint of the fake; the value is its http.ServeMux pattern.
type Route string

// Routes of the main listener (and RouteObjectStore on the object-storage one).
const (
	RouteVerify           Route = "POST /api/v4/runners/verify"
	RouteJobRequest       Route = "POST /api/v4/jobs/request"
	RouteUpdateJob        Route = "PUT /api/v4/jobs/{id}"
	RoutePatchTrace       Route = "PATCH /api/v4/jobs/{id}/trace"
	RouteArtifactUpload   Route = "POST /api/v4/jobs/{id}/artifacts"
	RouteArtifactDownload Route = "GET /api/v4/jobs/{id}/artifacts"
	RouteGit              Route = "/"
	RouteObjectStore      Route = "/objects/{key}"
)

// Fault alters the next Count requests on Route. Hold and Delay apply
// first; then Drop, else a non-zero Status answers instead of the fake's
// normal handling; with neither the request is handled normally (a pure
// delay).
type Fault struct {
	Route Route
	// Count is how many requests the fault applies to; 0 means 1.
	Count int
	// Hold, when non-nil, parks each request until it is closed (or the
	// client goes away).
	Hold <-chan struct{}
	// Delay parks each request for this long (wall clock).
	Delay time.Duration
	// Drop closes the connection without writing a response.
	Drop bool
	// Status answers with this status and a GitLab-style JSON
	// {"message": "<status> <text>"} body.
	Status int
	// RetryAfter, when non-empty, is sent as the Retry-After header.
	RetryAfter string
	// Header holds extra response headers for a Status answer.
	Header http.Header
}

type faultState struct {
	Fault
	left int
}

// InjectFault queues f; faults on the same route apply in injection order.
func (s *Server) InjectFault(f Fault) {
	if s.init() != nil {
		return
	}
	if f.Count <= 0 {
		f.Count = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &faultState{Fault: f, left: f.Count})
}

// takeFault consumes one use of the first fault for route, if any.
func (s *Server) takeFault(route Route) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.Route != route {
			continue
		}
		f.left--
		if f.left <= 0 {
			s.faults = slices.Delete(s.faults, i, i+1)
		}
		c := f.Fault
		return &c
	}
	return nil
}

// Request is one request the fake received, for test assertions.
type Request struct {
	// Route is the endpoint that matched.
	Route Route
	// Method and Path (with query) as sent.
	Method, Path string
	// Header is a copy of the request headers.
	Header http.Header
	// Body holds the first 64 KiB of the body the handler read.
	Body []byte
	// Status is the answer's status; 0 for a dropped connection.
	Status int
	// Faulted is true when an injected fault answered (or dropped) it.
	Faulted bool
	// At is when the request arrived.
	At time.Time
}

func (s *Server) maxRequestLog() int {
	if s.opts.MaxRequestLog > 0 {
		return s.opts.MaxRequestLog
	}
	return 10000
}

// Requests returns a copy of the request log, oldest first (the latest
// Options.MaxRequestLog requests).
func (s *Server) Requests() []Request {
	if s.init() != nil {
		return nil
	}
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	return slices.Clone(s.requests)
}

// routeStatus is a request's route and the status it was answered.
type routeStatus struct {
	route  Route
	status int
}

// Answered returns how many requests on route were answered status since
// the server started, counting those the bounded log dropped.
func (s *Server) Answered(route Route, status int) int {
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	return s.answered[routeStatus{route, status}]
}

// RequestsTo returns the logged requests on route, oldest first.
func (s *Server) RequestsTo(route Route) []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Route == route {
			out = append(out, r)
		}
	}
	return out
}

const maxLoggedBody = 64 << 10

// capBuf keeps the first maxLoggedBody bytes written. It is locked
// because some handlers (git's CGI) read the body in another goroutine
// while the answer is being logged.
type capBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capBuf) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := maxLoggedBody - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (c *capBuf) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

type teeBody struct {
	io.Reader
	io.Closer
}

// statusWriter captures the status and runs before() just ahead of the
// header, so a request is in the log before its client sees the answer.
type statusWriter struct {
	http.ResponseWriter
	status int
	before func()
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if code >= 200 && w.before != nil {
			w.before()
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrap logs the request, applies faults and calls h.
func (s *Server) wrap(route Route, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := Request{Route: route, Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), At: s.now()}
		var body capBuf
		r.Body = teeBody{io.TeeReader(r.Body, &body), r.Body}
		// GitLab's correlation id: as Rails' RequestId middleware, the
		// request's own X-Request-Id (word characters and dashes, at most
		// 255) when it sent one, else a new one. gitlab-runner prints it
		// in get_sources as the Gitaly correlation ID.
		w.Header().Set("X-Request-Id", requestID(r.Header.Get("X-Request-Id")))
		sw := &statusWriter{ResponseWriter: w}
		logged := false
		logIt := func() {
			if logged {
				return
			}
			logged = true
			rec.Body = body.Bytes()
			rec.Status = sw.status
			s.reqMu.Lock()
			s.requests = append(s.requests, rec)
			if s.answered == nil {
				s.answered = map[routeStatus]int{}
			}
			s.answered[routeStatus{rec.Route, rec.Status}]++
			if keep := s.maxRequestLog(); len(s.requests) > keep {
				s.requests = slices.Delete(s.requests, 0, len(s.requests)-keep)
			}
			s.reqMu.Unlock()
			s.log.Debug("gitlabfake request", "method", rec.Method, "path", rec.Path, "status", rec.Status, "faulted", rec.Faulted)
		}
		sw.before = logIt
		defer func() {
			if sw.status == 0 && !rec.Faulted {
				sw.status = http.StatusOK // net/http's implicit answer
			}
			logIt()
		}()
		if f := s.takeFault(route); f != nil {
			if f.Hold != nil {
				select {
				case <-f.Hold:
				case <-r.Context().Done():
				}
			}
			if f.Delay > 0 {
				t := time.NewTimer(f.Delay)
				select {
				case <-t.C:
				case <-r.Context().Done():
				}
				t.Stop()
			}
			switch {
			case f.Drop:
				rec.Faulted = true
				logIt() // before the client can see the connection die
				if conn, _, err := http.NewResponseController(sw).Hijack(); err == nil {
					conn.Close()
				} else {
					panic(http.ErrAbortHandler)
				}
				return
			case f.Status != 0:
				rec.Faulted = true
				for k, vs := range f.Header {
					sw.Header()[k] = vs
				}
				if f.RetryAfter != "" {
					sw.Header().Set("Retry-After", f.RetryAfter)
				}
				writeMessage(sw, f.Status, strconv.Itoa(f.Status)+" "+http.StatusText(f.Status))
				return
			}
		}
		h(sw, r)
	}
}

// writeMessage answers a GitLab API error: {"message": msg}.
func writeMessage(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"message": msg})
	w.Write(b)
}

// forbidden renders Grape's forbidden!(reason): "403 Forbidden  - reason".
func forbidden(w http.ResponseWriter, reason string) {
	msg := "403 Forbidden"
	if reason != "" {
		msg += "  - " + reason
	}
	writeMessage(w, http.StatusForbidden, msg)
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(string(RouteVerify), s.wrap(RouteVerify, s.handleVerify))
	mux.HandleFunc(string(RouteJobRequest), s.wrap(RouteJobRequest, s.handleJobRequest))
	mux.HandleFunc(string(RouteUpdateJob), s.wrap(RouteUpdateJob, s.handleUpdateJob))
	mux.HandleFunc(string(RoutePatchTrace), s.wrap(RoutePatchTrace, s.handlePatchTrace))
	mux.HandleFunc(string(RouteArtifactUpload), s.wrap(RouteArtifactUpload, s.handleArtifactUpload))
	mux.HandleFunc(string(RouteArtifactDownload), s.wrap(RouteArtifactDownload, s.handleArtifactDownload))
	mux.HandleFunc(string(RouteGit), s.wrap(RouteGit, s.handleGit))
	if s.opts.Views != nil {
		mux.Handle("/-/", s.opts.Views)
	}
	return mux
}

// RunnerTokenLeaks returns the logged requests that carried a registered
// runner token anywhere (a header, including basic auth, the query or the
// logged body) on a route other than /runners/verify and /jobs/request,
// for tests that per-job endpoints only ever see job tokens (AUTH-01).
func (s *Server) RunnerTokenLeaks() []Request {
	if s.init() != nil {
		return nil
	}
	s.mu.Lock()
	var toks []string
	for t := range s.runners {
		toks = append(toks, t)
	}
	s.mu.Unlock()
	var out []Request
	for _, r := range s.Requests() {
		if r.Route == RouteVerify || r.Route == RouteJobRequest {
			continue
		}
		if leaks(r, toks) {
			out = append(out, r)
		}
	}
	return out
}

func leaks(r Request, toks []string) bool {
	for _, t := range toks {
		if strings.Contains(r.Path, t) || bytes.Contains(r.Body, []byte(t)) {
			return true
		}
		for _, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, t) {
					return true
				}
				if dec, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v, "Basic ")); err == nil && bytes.Contains(dec, []byte(t)) {
					return true
				}
			}
		}
	}
	return false
}

// requestID is the X-Request-Id GitLab answers for a request that sent
// sent: sent stripped of all but word characters and '-', cut to 255
// bytes, or a new ID when nothing is left.
func requestID(sent string) string {
	id := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return -1
	}, sent)
	if len(id) > 255 {
		id = id[:255]
	}
	if id == "" {
		id = randHex(13)[:26]
	}
	return id
}
