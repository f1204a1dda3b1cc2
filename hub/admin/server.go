package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/vk-ci/vk/hub/api"

	"github.com/vk-ci/vk/hub/enrol"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
)

// SocketName is the admin socket's file name in the hub's state directory.
const SocketName = "admin.sock"

// SocketPath returns <stateDir>/admin.sock.
func SocketPath(stateDir string) string { return filepath.Join(stateDir, SocketName) }

// maxBody bounds an admin request body (a policy file is the largest).
const maxBody = 4 << 20

// Routes of the admin socket (HTTP/1.1 over the unix socket).
const (
	routeTokens      = "POST /admin/tokens"
	routeRelays      = "GET /admin/relays"
	routeRelayRemove = "DELETE /admin/relays/{id}"
	routeNodes       = "GET /admin/nodes"
	routePools       = "PUT /admin/nodes/{id}/pools"
	routeCeiling     = "PUT /admin/nodes/{id}/ceiling"
	routeDrain       = "PUT /admin/nodes/{id}/drain"
	routeNodeRemove  = "DELETE /admin/nodes/{id}"
	routePolicyGet   = "GET /admin/policy"
	routePolicyPut   = "PUT /admin/policy"
	routeProjects    = "GET /admin/projects"
	routeApproval    = "POST /admin/projects"
	routeQueue       = "GET /admin/queue"
)

// TokenRequest asks for an enrolment token.
type TokenRequest struct {
	// Kind is "gitlab" or "node".
	Kind string `json:"kind"`
	// TTLSecs is its life in seconds; 0 means enrol.DefaultTTL.
	TTLSecs int64 `json:"ttl_secs,omitempty"`
}

// TokenAnswer is a minted token.
type TokenAnswer struct {
	// Token is the one-time token text.
	Token string `json:"token"`
	// Kind is what it enrols.
	Kind string `json:"kind"`
	// Expires is when it stops working.
	Expires time.Time `json:"expires"`
	// CAFingerprint is the hub CA's SHA-256 fingerprint (hex), for the
	// operator to compare with what join prints; empty if unknown.
	CAFingerprint string `json:"ca_fingerprint,omitempty"`
}

// Relay is one enrolled relay as `vk-hub relays list` shows it.
type Relay struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	Created   time.Time `json:"created"`
	Removed   bool      `json:"removed,omitempty"`
	RemovedAt time.Time `json:"removed_at,omitzero"`
	// Release is the vk-gitlab release of its last report; empty before
	// one (or when the hub does not serve updates).
	Release string `json:"release,omitempty"`
}

// PoolsRequest sets a node's pools.
type PoolsRequest struct {
	Pools []string `json:"pools"`
}

// CeilingRequest sets a node's ceiling: >= 0 or [NoCeiling].
type CeilingRequest struct {
	Ceiling int `json:"ceiling"`
}

// DrainRequest starts or ends draining.
type DrainRequest struct {
	Drain bool `json:"drain"`
}

// ApprovalRequest approves or rejects a project, or with Project 0 a
// GitLab server (OPS-06).
type ApprovalRequest struct {
	Instance string              `json:"instance"`
	Project  int64               `json:"project"`
	State    store.ApprovalState `json:"state"`
}

// Store is what the admin socket asks of the hub's store: principals and
// tokens, approvals, and the audit log its changes go to.
type Store interface {
	store.Principals
	store.Approvals
	store.Audit
}

// Config configures a [Server]. Store, Backend and Enroller are required.
type Config struct {
	Store    Store
	Backend  Backend
	Enroller *enrol.Enroller
	// CAFingerprint is shown with every new token (hex SHA-256 of the
	// hub's CA); empty shows none.
	CAFingerprint string
	// Clock stamps approvals and audit entries; nil means real.
	Clock clock.Clock
	// Log receives one line per change; nil discards.
	Log *slog.Logger
	// AllowUIDs are the user IDs allowed besides root and the hub's own
	// user; checked with SO_PEERCRED on Linux.
	AllowUIDs []int
	// Releases serves relay updates (OPS-04); nil turns them off.
	Releases Releases
}

// Server is the admin socket's handler set. Create it with [NewServer].
type Server struct {
	cfg Config
	clk clock.Clock
	log *slog.Logger
	mux *http.ServeMux
	// peer identifies a connection's user; peerUID outside tests.
	peer func(net.Conn) (int, error)
}

// NewServer returns a Server over cfg.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Backend == nil || cfg.Enroller == nil {
		return nil, errors.New("admin: Config needs Store, Backend and Enroller")
	}
	s := &Server{cfg: cfg, clk: clock.Or(cfg.Clock), log: cmp.Or(cfg.Log, slog.New(slog.DiscardHandler)), mux: http.NewServeMux(), peer: peerUID}
	for _, r := range []struct {
		pattern string
		h       func(http.ResponseWriter, *http.Request, []byte) error
	}{
		{routeTokens, s.createToken}, {routeRelays, s.listRelays}, {routeRelayRemove, s.removeRelay},
		{routeNodes, s.listNodes}, {routePools, s.setPools}, {routeCeiling, s.setCeiling}, {routeDrain, s.drain},
		{routeNodeRemove, s.removeNode},
		{routePolicyGet, s.getPolicy}, {routePolicyPut, s.setPolicy},
		{routeProjects, s.listProjects}, {routeApproval, s.setApproval},
		{routeQueue, s.listQueue},
		{routeReleases, s.listReleases}, {routeRelayUpdate, s.updateRelay},
	} {
		s.mux.Handle(r.pattern, s.wrap(r.pattern, r.h))
	}
	s.mux.HandleFunc(routeReleasePut, s.putRelease) // streamed: larger than maxBody
	registerPprof(s.mux)
	return s, nil
}

// registerPprof serves the Go runtime's profiles under /debug/pprof/ on
// the admin socket only (the same peer check as every admin route): heap,
// goroutine, allocs, block, mutex, threadcreate by name, a CPU profile
// (profile?seconds=N), an execution trace (trace?seconds=N), cmdline and
// symbol. The hub's network listeners use their own muxes and never serve
// them (net/http/pprof's registration on http.DefaultServeMux is unused).
func registerPprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

type ctxKey struct{}

// Listen creates the admin socket at path, mode 0600. A stale socket file
// left by a crashed hub is replaced; one a running hub answers on is an
// error. The hub's state directory (0700) keeps others out before the
// chmod.
func (s *Server) Listen(path string) (net.Listener, error) {
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("admin: %s is in use: is another vk-hub running?", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("admin: remove stale socket: %w", err)
	}
	return listenPrivate(path)
}

// ServeOn serves the admin routes on ln until ctx ends, then shuts down
// (in-flight requests get 5 s) and closes ln, which removes a unix
// socket's file. On Linux every connection's peer must be root, the hub's
// own user or one of Config.AllowUIDs (SO_PEERCRED), else it is answered
// 403. It returns nil after ctx ended.
func (s *Server) ServeOn(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.peerCheck(s.mux),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, ctxKey{}, c)
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			srv.Shutdown(sctx)
			cancel()
		case <-done:
		}
	}()
	err := srv.Serve(ln)
	close(done)
	<-stopped
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("admin: serve: %w", err)
}

func listenPrivate(path string) (net.Listener, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("admin: listen %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin: chmod %s: %w", path, err)
	}
	return ln, nil
}

// peerCheck refuses callers other than root, the hub's user and
// AllowUIDs, and records the caller as the request's actor.
func (s *Server) peerCheck(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(ctxKey{}).(net.Conn)
		uid, err := s.peer(c)
		if err != nil {
			api.WriteJSON(w, http.StatusForbidden, client.Error{Error: "admin socket: cannot identify caller", Code: client.CodeForbidden})
			return
		}
		if uid >= 0 && uid != 0 && uid != os.Getuid() && !slices.Contains(s.cfg.AllowUIDs, uid) {
			api.WriteJSON(w, http.StatusForbidden, client.Error{Error: fmt.Sprintf("admin socket: uid %d may not use it", uid), Code: client.CodeForbidden})
			return
		}
		if uid >= 0 {
			r = r.WithContext(context.WithValue(r.Context(), actorKey{}, actorName(uid)))
		}
		h.ServeHTTP(w, r)
	})
}

type actorKey struct{}

func actorName(uid int) string {
	name := strconv.Itoa(uid)
	if u, err := user.LookupId(name); err == nil {
		return "operator:" + u.Username
	}
	return "operator:uid " + name
}

// actor returns who is asking, for the audit log.
func actor(r *http.Request) string {
	if a, ok := r.Context().Value(actorKey{}).(string); ok {
		return a
	}
	return "operator"
}

// wrap reads the body (bounded), runs h, and maps its error once: admin
// and store sentinels to 400/404, the rest to 500.
func (s *Server) wrap(route string, h func(http.ResponseWriter, *http.Request, []byte) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err == nil {
			err = h(w, r, body)
		} else {
			err = fmt.Errorf("%w: body: %v", ErrInvalid, err)
		}
		if err == nil {
			return
		}
		s.writeErr(w, r, route, err)
	})
}

// writeErr maps a handler's error once: admin and store sentinels to
// 400/404, the rest to 500.
func (s *Server) writeErr(w http.ResponseWriter, r *http.Request, route string, err error) {
	status, code := http.StatusInternalServerError, client.CodeInternal
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, store.ErrNotFound):
		status, code = http.StatusNotFound, client.CodeNotFound
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrPolicy), errors.Is(err, enrol.ErrKind), errors.Is(err, enrol.ErrTTL):
		status, code = http.StatusBadRequest, client.CodeInvalid
	}
	// An operator's typo (404, 400) is routine; only the hub's own
	// failure needs attention.
	lvl := slog.LevelInfo
	if status >= 500 {
		lvl = slog.LevelWarn
	}
	s.log.Log(r.Context(), lvl, "admin request failed", logkey.Route, route, logkey.Status, status, logkey.Err, err)
	api.WriteJSON(w, status, client.Error{Error: err.Error(), Code: code})
}

// decode decodes body strictly into v; errors wrap ErrInvalid.
func decode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data", ErrInvalid)
	}
	return nil
}

func (s *Server) audit(ctx context.Context, r *http.Request, action, subject, detail string) error {
	return AppendAudit(ctx, s.cfg.Store, s.clk.Now().UTC(), actor(r), action, subject, detail)
}
