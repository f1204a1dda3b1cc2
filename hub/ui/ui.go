package ui

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/clock"
)

// Sentinel errors.
var (
	// ErrConfig: [New] was given an unusable [Config]; the error names the
	// field.
	ErrConfig = errors.New("ui: invalid config")
	// ErrNoOutput: a [Backend] has no output for the job (never started,
	// or dropped after settling). The job page then says so; it is no
	// failure of the page.
	ErrNoOutput = errors.New("ui: no output")
	// ErrForbidden: a POST came without a session cookie or with a CSRF
	// token that does not match it. Answered 403.
	ErrForbidden = errors.New("ui: forbidden")
	// ErrBadForm: a form field is malformed. Answered 400.
	ErrBadForm = errors.New("ui: bad form")
)

// Defaults of [Config].
const (
	// DefaultOutputTail is how many bytes of a job's output its page shows.
	DefaultOutputTail = 64 << 10
	// DefaultJobs is how many recent jobs the Jobs page lists without a
	// ?limit; MaxJobs bounds any ?limit.
	DefaultJobs = 100
	MaxJobs     = 1000
	// DefaultAudit is how many audit entries the Audit page lists without
	// a ?limit; MaxAudit bounds any ?limit.
	DefaultAudit = 200
	MaxAudit     = 5000
	// maxForm bounds a POST body.
	maxForm = 16 << 10
)

// WaitingKind says what waits in the queue ([admin.WaitingKind]).
type WaitingKind = admin.WaitingKind

// Waiting kinds.
const (
	WaitTicket = admin.WaitTicket
	WaitJob    = admin.WaitJob
	WaitRunner = admin.WaitRunner
)

// Waiting is one entry of the hub's queue, as the Queue page shows it
// ([admin.Waiting], also what `vk-hub queue` lists).
type Waiting = admin.Waiting

// JobRow is one job as the Jobs page lists it. [RowFromJob] makes one
// from a store record.
type JobRow struct {
	// ID is the hub job ID.
	ID string
	// State is queued, starting, running or finished.
	State store.JobState
	// Node is the node it was started on; empty before.
	Node string
	// Stage is the stage the node reported last.
	Stage string
	// Tenant, Relay (the submitting principal) and Runner.
	Tenant string
	Relay  string
	Runner string
	// Instance, Project and GitLabJob name it in GitLab; 0 if unknown.
	Instance  string
	Project   int64
	GitLabJob int64
	// Created and Updated are when the record was made and last changed.
	Created time.Time
	Updated time.Time
	// Runtime is how long it has existed on the hub (finished: until its
	// last change; unfinished: until now); 0 if unknown.
	Runtime time.Duration
	// Failure is why it failed ("script", "timeout", …); empty while
	// unfinished or when it succeeded. Message explains it.
	Failure string
	Message string
	// Name, CIStage and Pipeline are the job's name, its pipeline stage
	// and its pipeline ID in GitLab, and ProjectPath its project's path,
	// from the job's stored (redacted) spec; empty or 0 if unknown.
	Name        string
	CIStage     string
	Pipeline    int64
	ProjectPath string
	// Placement is where it asked to run, as operators read it
	// ("linux [ssd] mem=2G cpus=2 disk=10G"); empty if unknown.
	Placement string
}

// Result is the job's outcome as GitLab names it: "success" or "failed"
// once finished, else its hub state (queued, starting, running).
func (j JobRow) Result() string {
	switch {
	case j.State != store.JobFinished:
		return string(j.State)
	case j.Failure != "":
		return "failed"
	}
	return "success"
}

// Backend is what the UI needs of the hub's live state: the admin
// socket's [admin.Backend] (nodes, pools, ceiling, drain, policy,
// approval changes, the queue) and two read-only views. Methods are
// called concurrently from HTTP handler goroutines.
type Backend interface {
	admin.Backend
	// Jobs lists up to limit recent jobs, newest first (limit > 0).
	Jobs(ctx context.Context, limit int) ([]JobRow, error)
	// JobOutputTail returns the last max bytes (or fewer) of a job's
	// output; an error wrapping [ErrNoOutput] or store.ErrNotFound when
	// there is none.
	JobOutputTail(ctx context.Context, id string, max int) ([]byte, error)
	// Relays lists the enrolled relays (removed ones left out), sorted
	// by ID, each with the runners of its last report.
	Relays(ctx context.Context) ([]RelayRow, error)
}

// RelayRow is one relay as the Relays page shows it.
type RelayRow struct {
	// ID is the relay's enrolled ID, Name the name it joined with.
	ID, Name string
	// Connected: its session is up now.
	Connected bool
	// GitLab is its GitLab server's URL; Release and Host what it
	// reported; empty before its first report.
	GitLab, Release, Host string
	// AllowsUpdate: its report's allow lists update (OPS-04).
	AllowsUpdate bool
	// Runners are the runners of its last report.
	Runners []RunnerRow
}

// RunnerRow is one runner of a relay.
type RunnerRow struct {
	// Name is the runner's name; Tenant the capacity-policy tenant its
	// work is charged to ("" the default tenant).
	Name, Tenant string
	// Placement is where its jobs run, as operators read it.
	Placement string
	// RequestConcurrency and Limit are its request loops and job limit
	// (0: none beyond the relay's concurrent).
	RequestConcurrency, Limit int
	// TokenAccepted: GitLab accepted its token at the relay's last
	// verify.
	TokenAccepted bool
	// State is what the relay's last heartbeat said of it (polling,
	// waiting_capacity, server_pending, token_refused, unhealthy); empty
	// before one.
	State string
}

// Store is what the UI asks of the hub's store: a job's record,
// approvals, and the audit log.
type Store interface {
	GetJob(ctx context.Context, id string) (store.Job, error)
	store.Approvals
	store.Audit
}

// Config configures [New]. Backend, Store and Operators are required.
type Config struct {
	// Backend is the hub's live state.
	Backend Backend
	// Store is the hub's durable store: approvals, jobs, audit.
	Store Store
	// BasePath is the path the UI is served under: "" (the root of its
	// own listener) or e.g. "/ui" (no trailing slash). The UI URL the hub
	// puts into approval_url (API-56) is the listener's URL + BasePath.
	BasePath string
	// Log receives request failures; nil discards.
	Log *slog.Logger
	// Clock is the time source ("waited", audit times); nil is real time.
	Clock clock.Clock
	// CSRFKey keys the CSRF HMAC; at least 32 bytes. nil makes a random
	// key (forms do not survive a restart).
	CSRFKey []byte
	// Operators decides who may use the UI.
	Operators Auth
	// OutputTail is how many bytes of output a job page shows; 0 means
	// [DefaultOutputTail].
	OutputTail int
	// TraceDir is the hub's workload trace directory, which the policy
	// page's dry run replays; "" when the hub records no trace.
	TraceDir string
	// DryRunTimeout bounds one dry run; 0 means [DefaultDryRunTimeout].
	DryRunTimeout time.Duration
	// Updates serves the Relays page's update button (OPS-04); nil shows
	// none.
	Updates Updates
}

// Updates is what the Relays page's update button needs: the published
// releases and sending one to a relay (admin.Releases has both).
type Updates interface {
	List(ctx context.Context) ([]admin.Release, error)
	UpdateRelay(ctx context.Context, relay, version string) error
}

// server is the UI's state; read-only after New.
type server struct {
	cfg   Config
	base  string
	log   *slog.Logger
	clk   clock.Clock
	key   []byte
	pages map[string]*pageTemplate
	css   []byte
	// dryRuns holds a token while a dry run replays: one at a time.
	dryRuns chan struct{}
}

//go:embed templates/*.html static/ui.css
var assets embed.FS

// New checks cfg and returns the UI's handler. It starts nothing: the
// handler serves requests on the caller's listener.
func New(cfg Config) (http.Handler, error) {
	var errs []error
	if cfg.Backend == nil {
		errs = append(errs, fmt.Errorf("%w: no Backend", ErrConfig))
	}
	if cfg.Store == nil {
		errs = append(errs, fmt.Errorf("%w: no Store", ErrConfig))
	}
	if cfg.Operators == nil {
		errs = append(errs, fmt.Errorf("%w: no Operators (use LoopbackOnly or BasicAuth)", ErrConfig))
	}
	if b := cfg.BasePath; b != "" && (!strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") || strings.ContainsAny(b, "{}? #%")) {
		errs = append(errs, fmt.Errorf("%w: BasePath %q: want \"\" or \"/path\" without a trailing slash", ErrConfig, b))
	}
	if cfg.CSRFKey != nil && len(cfg.CSRFKey) < 32 {
		errs = append(errs, fmt.Errorf("%w: CSRFKey of %d bytes, want at least 32", ErrConfig, len(cfg.CSRFKey)))
	}
	if cfg.OutputTail < 0 {
		errs = append(errs, fmt.Errorf("%w: OutputTail %d", ErrConfig, cfg.OutputTail))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, base: cfg.BasePath, log: cmp.Or(cfg.Log, slog.New(slog.DiscardHandler)), clk: clock.Or(cfg.Clock), key: cfg.CSRFKey}
	if s.key == nil {
		s.key = make([]byte, 32)
		rand.Read(s.key)
	} else {
		s.key = append([]byte(nil), s.key...)
	}
	s.cfg.OutputTail = cmp.Or(s.cfg.OutputTail, DefaultOutputTail)
	if s.cfg.DryRunTimeout <= 0 {
		s.cfg.DryRunTimeout = DefaultDryRunTimeout
	}
	s.dryRuns = make(chan struct{}, 1)
	var err error
	if s.pages, err = parseTemplates(s); err != nil {
		return nil, err
	}
	if s.css, err = fs.ReadFile(assets, "static/ui.css"); err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	return s.routes(), nil
}

// routes registers every page and form on a fresh mux, behind auth and
// the security headers.
func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	b := s.base
	get := func(pat string, h func(http.ResponseWriter, *http.Request) error) {
		mux.Handle("GET "+b+pat, s.wrap(pat, h))
	}
	post := func(pat string, h func(http.ResponseWriter, *http.Request) error) {
		mux.Handle("POST "+b+pat, s.wrapPost(pat, h))
	}
	get("/{$}", s.fleet)
	get("/nodes/{id}", s.node)
	get("/queue", s.queue)
	get("/jobs", s.jobs)
	get("/jobs/{id}", s.job)
	get("/gitlab", s.servers)
	get("/gitlab/{instance}/projects/{project}", s.project)
	get("/relays", s.relays)
	get("/policy", s.policy)
	get("/policy/dry-run", s.dryRunForm)
	mux.Handle("POST "+b+"/policy/dry-run", s.wrap("/policy/dry-run", s.dryRun)) // its own body limit: a policy file
	get("/audit", s.audit)
	mux.HandleFunc("GET "+b+"/static/ui.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write(s.css)
	})
	post("/nodes/{id}/pools", s.setPools)
	post("/nodes/{id}/ceiling", s.setCeiling)
	post("/nodes/{id}/drain", s.setDrain)
	post("/relays/{id}/update", s.updateRelay)
	post("/gitlab/{instance}/approval", s.decideServer)
	post("/gitlab/{instance}/projects/{project}/approval", s.decideProject)
	if b != "" {
		mux.Handle("GET "+b, http.RedirectHandler(b+"/", http.StatusMovedPermanently))
	}
	mux.Handle(b+"/", s.wrap("notfound", func(http.ResponseWriter, *http.Request) error {
		return errNotFound
	}))
	return s.authenticate(mux)
}
