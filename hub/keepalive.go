package hub

import (
	"bufio"
	"context"
	"net"
	"net/http"

	"github.com/vk-ci/vk/internal/connlimit"
	"github.com/vk-ci/vk/reqsign"
)

// apiConnContext records, per API connection, the listener's connection
// (for the unauthenticated caps) and the request sequence numbers the
// hub accepted on it (an in-stream replay is refused, AUTH-14).
func apiConnContext(ctx context.Context, c net.Conn) context.Context {
	return reqsign.TrackConn(connlimit.ConnContext(ctx, c))
}

// closeUnauthenticated makes the hub close a connection after the answer
// to any request that left it unauthenticated (an unsigned route such as
// enrolment or /healthz, or a refused signature) and after every 401, so
// an unauthenticated connection serves one request and never idles on a
// per-address slot; connections that authenticated stay open for the
// client's next request.
func closeUnauthenticated(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&closingWriter{ResponseWriter: w, ctx: r.Context()}, r)
	})
}

// closingWriter sets "Connection: close" on the answer's header when it
// is written, if the connection is not (or no longer) to be kept.
type closingWriter struct {
	http.ResponseWriter
	ctx     context.Context
	written bool
}

func (c *closingWriter) WriteHeader(code int) {
	if !c.written && code >= 200 {
		c.written = true
		if code == http.StatusUnauthorized || !connlimit.IsAuthenticated(c.ctx) {
			c.Header().Set("Connection", "close")
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *closingWriter) Write(b []byte) (int, error) {
	if !c.written {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(b)
}

// Flush, Hijack and Unwrap pass through, so streaming answers and the
// session upgrades work as on the plain writer.
func (c *closingWriter) Flush() {
	if !c.written {
		c.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(c.ResponseWriter).Flush()
}

func (c *closingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(c.ResponseWriter).Hijack()
}

func (c *closingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
