package api

import (
	"bufio"
	"net"
	"net/http"
	"strings"

	"github.com/vk-ci/vk/proto/client"
)

// JSONErrors wraps the hub's mux so that every error answer under /v1/
// has the API's error body (API-55), including those the mux makes itself:
// an unknown route is 404 not_found, a wrong method 405 (code invalid,
// with Allow), and a path the mux would redirect to its clean form (a
// doubled slash, a dot segment, a missing trailing slash) is 404 not_found
// naming the clean path instead of a redirect: a signature covers the
// path as sent, so following a redirect could only fail. Any other
// answer that is an error without a JSON body (http.Error from a library)
// gets the body its status implies. Paths outside /v1/ pass untouched.
func JSONErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1" && !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&errorShaper{ResponseWriter: w}, r)
	})
}

// errorShaper replaces an error answer that is not JSON by the API's
// error body with the code its status implies.
type errorShaper struct {
	http.ResponseWriter
	wrote   bool
	swallow bool // the original body is discarded
}

func (e *errorShaper) WriteHeader(status int) {
	if e.wrote {
		return
	}
	e.wrote = true
	h := e.Header()
	isJSON := strings.HasPrefix(h.Get("Content-Type"), "application/json")
	redirect := status >= 300 && status < 400
	if !redirect && (status < 400 || isJSON) {
		e.ResponseWriter.WriteHeader(status)
		return
	}
	e.swallow = true
	body := client.Error{Code: codeOf(status), Error: strings.ToLower(http.StatusText(status))}
	switch {
	case redirect:
		loc := h.Get("Location")
		status = http.StatusNotFound
		body = client.Error{Code: client.CodeNotFound, Error: "no such route; the clean path is " + loc}
		h.Del("Location")
	case status == http.StatusNotFound:
		body.Error = "no such route"
	case status == http.StatusMethodNotAllowed:
		body.Error = "method not allowed; allowed: " + h.Get("Allow")
	}
	h.Del("X-Content-Type-Options")
	h.Del("Content-Length")
	WriteJSON(e.ResponseWriter, status, body)
}

func (e *errorShaper) Write(b []byte) (int, error) {
	if !e.wrote {
		e.WriteHeader(http.StatusOK)
	}
	if e.swallow {
		return len(b), nil
	}
	return e.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (read
// deadlines, flushes).
func (e *errorShaper) Unwrap() http.ResponseWriter { return e.ResponseWriter }

// Flush passes flushes through (long-poll bodies).
func (e *errorShaper) Flush() {
	if f, ok := e.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack passes the connection to a WebSocket upgrade.
func (e *errorShaper) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(e.ResponseWriter).Hijack()
}

// codeOf is the API code of an HTTP error status (API-46..54).
func codeOf(status int) client.Code {
	switch status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusLengthRequired, http.StatusUnsupportedMediaType,
		http.StatusRequestHeaderFieldsTooLarge, http.StatusRequestURITooLong:
		return client.CodeInvalid
	case http.StatusUnauthorized:
		return client.CodeUnauthorized
	case http.StatusForbidden:
		return client.CodeForbidden
	case http.StatusNotFound:
		return client.CodeNotFound
	case http.StatusConflict:
		return client.CodeConflict
	case http.StatusRequestEntityTooLarge:
		return client.CodeTooLarge
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		return client.CodeUnavailable
	}
	if status >= 500 {
		return client.CodeInternal
	}
	return client.CodeInvalid
}
