package gitlabfake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// Errors returned by the test-facing API.
var (
	// ErrNotFound: no project, pipeline or job by that name/id.
	ErrNotFound = errors.New("gitlabfake: not found")
	// ErrInvalid: a spec or argument the fake cannot accept.
	ErrInvalid = errors.New("gitlabfake: invalid")
	// ErrNotLoopback: Options.Addr is not a loopback address.
	ErrNotLoopback = errors.New("gitlabfake: address is not loopback")
	// ErrGit: running the real git binary failed.
	ErrGit = errors.New("gitlabfake: git")
)

// MismatchPolicy says how a final PUT (state success/failed) whose
// output.checksum or output.bytesize disagrees with the stored trace is answered.
type MismatchPolicy int

const (
	// MismatchAccept answers 200 and records the mismatch, as current Rails
	// does (it only logs/metrics the mismatch). The zero value.
	MismatchAccept MismatchPolicy = iota
	// MismatchPending answers 202 with X-GitLab-Trace-Update-Interval backing
	// off 1, 2, 4 … 64 s (Rails' pending-state path) until the trace matches
	// or AcceptTimeout passed since the first final update, then 200.
	MismatchPending
	// Mismatch412 answers 412 (legacy Rails trace validation), forcing the
	// runner to re-send the whole trace from offset 0.
	Mismatch412
)

// Options configures a [Server]. The zero value is usable.
type Options struct {
	// Addr is the listen address; "" means "127.0.0.1:0". Must be loopback.
	Addr string
	// RunnerToken is the first registered runner token; "" means a fresh
	// "glrt-t1_…" token (see [Server.RunnerToken]).
	RunnerToken string
	// RunnerTokenExpiresAt is sent as token_expires_at by /runners/verify;
	// zero means null (a token that never expires).
	RunnerTokenExpiresAt time.Time
	// LongPoll is Workhorse's apiCiLongPollingDuration; 0 disables long
	// polling (Workhorse's effective default).
	LongPoll time.Duration
	// TwoPhaseCommit keeps a job handed to a runner advertising
	// two_phase_job_commit pending until PUT state=running. false (default)
	// behaves as GitLab.com does today (DECISIONS ruling 5): the job is
	// running as soon as the 201 is sent.
	TwoPhaseCommit bool
	// TraceUpdateInterval is X-GitLab-Trace-Update-Interval in seconds on
	// PATCH/PUT answers; 0 means 3 (Rails' value while someone watches the log).
	TraceUpdateInterval int
	// MaxArtifactSize caps an artifact upload in bytes (413 above it);
	// 0 means 100 MiB.
	MaxArtifactSize int64
	// MaxTraceSize caps a job's trace in bytes (ci_jobs_trace_size_limit):
	// a PATCH over it fails the job with trace_size_exceeded and answers
	// 403; 0 means no limit.
	MaxTraceSize int64
	// ArtifactRedirect makes artifact uploads answer 307 to a second,
	// "object storage" listener, and direct downloads 302 to it.
	ArtifactRedirect bool
	// LegacyDependencyTokens puts each dependency's own job token in
	// dependencies[].token (older Rails) and lets that token download the
	// dependency's artifacts after the dependency ended. false (default):
	// the running job's token, as newer Rails sends.
	LegacyDependencyTokens bool
	// TraceMismatch is the final-update checksum policy.
	TraceMismatch MismatchPolicy
	// AcceptTimeout bounds MismatchPending; 0 means 5 minutes (Rails' ACCEPT_TIMEOUT).
	AcceptTimeout time.Duration
	// MaxRequestLog bounds the request log kept for [Server.Requests]
	// (oldest dropped first); 0 means 10000. [Server.Answered] counts
	// every request regardless.
	MaxRequestLog int
	// DataDir holds the bare git repositories; "" means a temp dir removed by Close.
	DataDir string
	// Logger receives request logs; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Views, when set, serves every path under /-/ (the standalone
	// command's job pages); nil serves none.
	Views http.Handler
}

// Server is a fake GitLab serving the runner API under /api/v4/ and git
// repositories through the real git http-backend. Create with [New] (or
// use a zero Server) and call [Server.Start]. All methods are safe for
// concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger

	initOnce sync.Once
	initErr  error

	mu             sync.Mutex
	changed        chan struct{} // closed and replaced on every state change; guarded by mu
	runners        map[string]*runner
	nextRunnerID   int64
	projects       map[string]*project
	nextProjectID  int64
	pipelines      map[int64]*pipeline
	nextPipelineID int64
	jobs           map[int64]*job
	nextJobID      int64
	faults         []*faultState
	objects        map[string]*objectUpload // object-storage uploads by key
	url, objURL    string

	dataDir    string
	ownDataDir bool
	gitBackend string

	srv, objSrv *http.Server
	started     bool

	reqMu    sync.Mutex // guards requests and answered; may be taken with mu held, never the reverse
	requests []Request
	// answered counts every request by route and status, the log's
	// dropped ones too.
	answered map[routeStatus]int

	// holdHook, when set (tests only), runs when a job request starts
	// being held by the long poll. Guarded by mu.
	holdHook func()
}

type runner struct {
	id           int64
	token        string
	uuid         string
	paused       bool
	queueVersion string
	wake         chan struct{} // closed when queueVersion changes
}

// New returns an unstarted server with opts.
func New(opts Options) *Server { return &Server{opts: opts} }

func (s *Server) init() error {
	s.initOnce.Do(func() {
		s.log = s.opts.Logger
		if s.log == nil {
			s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
		}
		s.changed = make(chan struct{})
		s.runners = map[string]*runner{}
		s.projects = map[string]*project{}
		s.pipelines = map[int64]*pipeline{}
		s.jobs = map[int64]*job{}
		s.objects = map[string]*objectUpload{}
		s.nextJobID = 1000
		s.dataDir = s.opts.DataDir
		if s.dataDir == "" {
			d, err := os.MkdirTemp("", "gitlabfake-")
			if err != nil {
				s.initErr = fmt.Errorf("gitlabfake: data dir: %w", err)
				return
			}
			s.dataDir, s.ownDataDir = d, true
		}
		tok := s.opts.RunnerToken
		if tok == "" {
			tok = "glrt-t1_" + randAlnum(20)
		}
		s.addRunnerLocked(tok)
	})
	return s.initErr
}

func (s *Server) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now()
	}
	return time.Now()
}

// Start binds Options.Addr and a second loopback listener for object
// storage (used with ArtifactRedirect) and serves until Close. A server
// starts once; a second Start returns ErrInvalid.
func (s *Server) Start() error {
	if err := s.init(); err != nil {
		return err
	}
	addr := s.opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("gitlabfake: addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%w: %q", ErrNotLoopback, addr)
	}
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		return fmt.Errorf("%w: already started", ErrInvalid)
	}
	if err := s.findGitBackend(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("gitlabfake: listen: %w", err)
	}
	objLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return fmt.Errorf("gitlabfake: listen object storage: %w", err)
	}
	s.mu.Lock()
	s.url = "http://" + ln.Addr().String()
	s.objURL = "http://" + objLn.Addr().String()
	s.srv = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 30 * time.Second}
	s.objSrv = &http.Server{Handler: s.objectHandler(), ReadHeaderTimeout: 30 * time.Second}
	s.started = true
	s.mu.Unlock()
	go s.srv.Serve(ln)
	go s.objSrv.Serve(objLn)
	s.log.Info("gitlabfake listening", "url", s.url)
	return nil
}

// URL is the base URL ("http://127.0.0.1:port", no trailing slash) to
// configure as the runner's GitLab url; "" before Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// ObjectStorageURL is the base URL of the object-storage listener.
func (s *Server) ObjectStorageURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objURL
}

// Close stops both listeners, aborts held long polls and removes a temp
// data dir. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	srv, objSrv := s.srv, s.objSrv
	s.srv, s.objSrv = nil, nil
	for _, r := range s.runners {
		r.tick()
	}
	own, dir := s.ownDataDir, s.dataDir
	s.ownDataDir = false
	s.mu.Unlock()
	var errs []error
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.SetKeepAlivesEnabled(false)
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, srv.Close())
		}
		if err := objSrv.Shutdown(ctx); err != nil {
			errs = append(errs, objSrv.Close())
		}
	}
	if own {
		errs = append(errs, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

// RunnerToken is the first registered runner token (Options.RunnerToken or
// the generated one).
func (s *Server) RunnerToken() string {
	if s.init() != nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.runners {
		if r.id == 1 {
			return r.token
		}
	}
	return ""
}

// AddRunner registers another runner authentication token and returns its
// runner id.
func (s *Server) AddRunner(token string) int64 {
	if s.init() != nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addRunnerLocked(token).id
}

// RemoveRunner deletes a runner: its token is then refused with 403.
func (s *Server) RemoveRunner(token string) {
	if s.init() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runners[token]; r != nil {
		r.tick()
		delete(s.runners, token)
	}
}

// PauseRunner pauses (or resumes) a runner: a paused runner's job
// requests are answered 204 with its current X-GitLab-Last-Update.
func (s *Server) PauseRunner(token string, paused bool) {
	if s.init() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runners[token]; r != nil {
		r.paused = paused
		r.queueVersion = randHex(16)
		r.tick()
	}
}

func (s *Server) addRunnerLocked(token string) *runner {
	if r, ok := s.runners[token]; ok {
		return r
	}
	s.nextRunnerID++
	r := &runner{id: s.nextRunnerID, token: token, uuid: newUUID(), queueVersion: randHex(16), wake: make(chan struct{})}
	s.runners[token] = r
	return r
}

// tick closes the runner's wake channel (waking long polls) and arms a new one.
func (r *runner) tick() {
	close(r.wake)
	r.wake = make(chan struct{})
}

// tickQueuesLocked re-rolls every runner's queue version, as Rails'
// tick_runner_queue does when a job any runner could take is enqueued.
func (s *Server) tickQueuesLocked() {
	for _, r := range s.runners {
		r.queueVersion = randHex(16)
		r.tick()
	}
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// WaitJobState blocks until job id is in one of states or ctx ends.
func (s *Server) WaitJobState(ctx context.Context, id int64, states ...JobState) (JobState, error) {
	if err := s.init(); err != nil {
		return "", err
	}
	for {
		s.mu.Lock()
		j := s.jobs[id]
		ch := s.changed
		var st JobState
		if j != nil {
			st = j.state
		}
		s.mu.Unlock()
		if j == nil {
			return "", fmt.Errorf("%w: job %d", ErrNotFound, id)
		}
		for _, want := range states {
			if st == want {
				return st, nil
			}
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("gitlabfake: job %d still %s: %w", id, st, ctx.Err())
		case <-ch:
		}
	}
}

// Changed returns a channel closed at the next state change (job state,
// trace, patch, update or artifact; not the request log), for tests that wait on a
// condition without sleeping.
func (s *Server) Changed() <-chan struct{} {
	if s.init() != nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func randAlnum(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return string(b)
}

// newJobToken returns a CI job token as current GitLab formats it:
// "glcbt-" + the partition id in hex (100 → "64") + "_" + 20 random characters.
func newJobToken() string { return "glcbt-64_" + randAlnum(20) }

func newUUID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
