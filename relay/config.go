package relay

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/vk-ci/vk/internal/conffile"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/gitlab"
)

// The most a configuration may ask for: concurrent and each runner's
// request_concurrency at most 128, at most 64 runners, as the hub also
// enforces on the session (RELAY-03, RSESS-09).
const (
	MaxConcurrent         = 128
	MaxRequestConcurrency = 128
	MaxRunners            = client.MaxRelayRunners
)

// Defaults (DECISIONS 10).
const (
	DefaultConcurrent = 10
	// DefaultRequestConcurrency is a runner's request loops when the file
	// leaves request_concurrency out, capped by the runner's limit and the
	// relay's concurrent (the runner never holds more jobs than those, so
	// further loops would only wait). Six loops keep a backlogged tenant's runner with a request
	// waiting at the hub whenever room frees, which fair share needs: the
	// hub can only order the requests it has, and with one loop a
	// weight-3 tenant got 52 % of the fleet instead of 75 % (vk-sim,
	// docs/capacity-policy.md, "Fair shares with the relay's defaults").
	// While GitLab has nothing, only a runner's lead request asks
	// (DECISIONS 14), so the extra loops cost no GitLab requests.
	DefaultRequestConcurrency = 6
	DefaultStateDir           = "/var/lib/vk-gitlab"
	DefaultShutdownTimeout    = 3600 // seconds
	DefaultOutputLimit        = 4 << 20
)

// ErrConfig wraps every configuration problem Validate or LoadConfig finds.
var ErrConfig = errors.New("relay: bad configuration")

// Config is vk-gitlab.toml (`version = 1`). Decoded strictly by
// internal/conffile: unknown keys are errors.
type Config struct {
	// Version must be 1.
	Version int `toml:"version"`
	// GitLab is the one GitLab server every runner takes jobs from
	// (RELAY-01).
	GitLab GitLabConfig `toml:"gitlab"`
	// Runners are the runners, at most 64 (RELAY-02, RELAY-03).
	Runners []RunnerConfig `toml:"runners"`
	// Concurrent bounds the jobs of all runners together, 1..128; 0 in
	// the file means the default, 10.
	Concurrent int `toml:"concurrent"`
	// StateDir holds the state files, system_id and the hub enrolment
	// (RELAY-05); default /var/lib/vk-gitlab.
	StateDir string `toml:"state_dir"`
	// ShutdownTimeout is how long running jobs get to finish after SIGTERM,
	// in seconds (RELAY-18); default 3600. Past it the daemon stops and its
	// next start resumes them.
	ShutdownTimeout int `toml:"shutdown_timeout"`
	// Hub holds the hub options; the hub itself is the enrolment's.
	Hub HubConfig `toml:"hub"`
	// MetricsListen is a loopback host:port serving Prometheus /metrics
	// (docs/metrics.md); "" means no listener.
	MetricsListen string `toml:"metrics_listen"`
}

// GitLabConfig is [gitlab].
type GitLabConfig struct {
	// URL is GitLab's base URL, http or https. Required.
	URL string `toml:"url"`
	// TLSCAFile is a PEM bundle to trust for GitLab's certificate instead
	// of the system roots; "" means the system roots.
	TLSCAFile string `toml:"tls_ca_file"`
}

// HubConfig is [hub].
type HubConfig struct {
	// URL, when set, must equal the enrolled hub URL (a guard against a
	// configuration copied between relays); "" means the enrolment's.
	URL string `toml:"url"`
	// URLs lists every hub instance (docs/ha.md), in the order the relay
	// tries them: it starts with the first and moves to the next when the
	// one in use cannot be reached, following a standby's answer to the
	// leader. The enrolled hub URL must be one of them. Empty means the
	// enrolled hub only; set url or urls, not both.
	URLs []string `toml:"urls"`
	// Allow lists what the hub may ask of this relay: "update" (OPS-04).
	// Empty means nothing.
	Allow []string `toml:"allow"`
	// ReleaseKeyFile is the release key's public half (PEM, as
	// `vk-hub relays sign-key` writes it): an update from the hub is
	// installed only when its signature verifies with it. Required when
	// allow lists update.
	ReleaseKeyFile string `toml:"release_key_file"`
}

// RunnerConfig is one [[runners]] entry (RELAY-02).
type RunnerConfig struct {
	// Name names the runner on the hub and its state file; "" means the
	// token's short form (RELAY-04, OPS-08: set it when the token may
	// change).
	Name string `toml:"name"`
	// TokenFile holds the glrt- runner authentication token. Required.
	TokenFile string `toml:"token_file"`
	// Pool is the node pool its jobs run in. Required.
	Pool string `toml:"pool"`
	// Labels a node must all carry; empty means any node of the pool.
	Labels []string `toml:"labels"`
	// Envelope is the room each job gets. Required, every field > 0.
	Envelope EnvelopeConfig `toml:"envelope"`
	// RequestConcurrency is the number of request loops, 1..128; 0 means
	// DefaultRequestConcurrency (6), at most Limit when set and at most
	// the relay's concurrent.
	RequestConcurrency int `toml:"request_concurrency"`
	// Limit bounds the runner's jobs; 0 means only concurrent does.
	Limit int `toml:"limit"`
	// OutputLimit is the trace limit ("4M"); 0 means 4 MiB.
	OutputLimit client.Size `toml:"output_limit"`
	// TLSCAFile is given to jobs as CI_SERVER_TLS_CA_FILE (SPEC-24);
	// "" means none.
	TLSCAFile string `toml:"tls_ca_file"`
}

// EnvelopeConfig is a runner's envelope: sizes like "16G" and an integer
// number of CPUs (PROTO-08).
type EnvelopeConfig struct {
	Mem  client.Size `toml:"mem"`
	CPUs int         `toml:"cpus"`
	Disk client.Size `toml:"disk"`
}

// Placement returns the runner's placement.
func (r RunnerConfig) Placement() client.Placement {
	return client.Placement{Pool: r.Pool, Labels: r.Labels,
		Envelope: client.Envelope{Mem: r.Envelope.Mem, CPUs: r.Envelope.CPUs, Disk: r.Envelope.Disk}}
}

// HubTicketsPerRelay is how many unended reservations the hub allows one
// relay by default (API-20's 256 per principal): a request past it is
// answered 503, so the default loops of all runners together stay within it.
const HubTicketsPerRelay = 256

// DefaultLoops is the request_concurrency of a runner that sets none, in a
// relay of the given number of runners: DefaultRequestConcurrency, at most
// its limit (when set, > 0), the relay's concurrent (when set, > 0) and an
// equal part of HubTicketsPerRelay (at least one loop), so that a relay of
// many runners (43 or more at six loops each) is not refused reservations
// by the hub's per-relay limit. A request_concurrency written out is taken
// as it is.
func DefaultLoops(limit, concurrent, runners int) int {
	n := DefaultRequestConcurrency
	if limit > 0 {
		n = min(n, limit)
	}
	if concurrent > 0 {
		n = min(n, concurrent)
	}
	if runners > 0 {
		n = min(n, max(1, HubTicketsPerRelay/runners))
	}
	return n
}

// DefaultConfig returns the defaults the file overrides.
func DefaultConfig() Config {
	return Config{Version: 1, Concurrent: DefaultConcurrent, StateDir: DefaultStateDir, ShutdownTimeout: DefaultShutdownTimeout}
}

// ShutdownDuration returns ShutdownTimeout as a duration.
func (c *Config) ShutdownDuration() time.Duration {
	return time.Duration(c.ShutdownTimeout) * time.Second
}

// Validate checks the configuration and lists every problem, each naming
// its key (RELAY-03 and the fields' contracts). It is pure: token files are
// read by LoadConfig, not here.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.GitLab.URL == "" {
		bad("gitlab.url is required")
	} else if u, err := url.Parse(c.GitLab.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("gitlab.url = %q: want an http or https URL", c.GitLab.URL)
	}
	if c.Concurrent < 0 || c.Concurrent > MaxConcurrent {
		bad("concurrent = %d: must be 1..%d", c.Concurrent, MaxConcurrent)
	}
	if c.ShutdownTimeout < 0 {
		bad("shutdown_timeout = %d: must not be negative", c.ShutdownTimeout)
	}
	if c.StateDir == "" {
		bad("state_dir must not be empty")
	}
	if c.MetricsListen != "" && !conffile.Loopback(c.MetricsListen) {
		bad("metrics_listen = %q: want a loopback host:port", c.MetricsListen)
	}
	c.validateHubURLs(bad)
	for _, a := range c.Hub.Allow {
		if a != client.RelayAllowUpdate {
			bad("hub.allow: unknown %q (known: update)", a)
		} else if c.Hub.ReleaseKeyFile == "" {
			bad("hub.allow lists update but hub.release_key_file is not set: name the release key's public half (vk-hub relays sign-key)")
		}
	}
	if len(c.Runners) == 0 {
		bad("no [[runners]] configured")
	}
	if len(c.Runners) > MaxRunners {
		bad("%d [[runners]]: at most %d", len(c.Runners), MaxRunners)
	}
	names := map[string]int{}
	for i, r := range c.Runners {
		key := fmt.Sprintf("runners[%d]", i)
		if r.Name != "" {
			key = fmt.Sprintf("runners[%d] (%s)", i, r.Name)
			if j, dup := names[r.Name]; dup {
				bad("%s.name: also the name of runners[%d]", key, j)
			}
			names[r.Name] = i
			if strings.ContainsAny(r.Name, `/\`+"\x00") || r.Name == "." || r.Name == ".." {
				bad("%s.name = %q: must be usable as a file name", key, r.Name)
			}
		}
		if r.TokenFile == "" {
			bad("%s.token_file is required", key)
		}
		if r.Pool == "" {
			bad("%s.pool is required", key)
		}
		if r.Envelope.Mem <= 0 || r.Envelope.CPUs <= 0 || r.Envelope.Disk <= 0 {
			bad("%s.envelope: mem, cpus and disk are required and must be positive", key)
		}
		if r.RequestConcurrency < 0 || r.RequestConcurrency > MaxRequestConcurrency {
			bad("%s.request_concurrency = %d: must be 1..%d", key, r.RequestConcurrency, MaxRequestConcurrency)
		}
		if r.Limit < 0 {
			bad("%s.limit = %d: must not be negative (0 means no limit)", key, r.Limit)
		}
		if r.OutputLimit < 0 {
			bad("%s.output_limit must not be negative", key)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// LoadConfig reads path over DefaultConfig, validates it, reads every
// runner's token and fills the per-runner defaults: name from the token's
// short form (RELAY-04), request_concurrency (DefaultRequestConcurrency,
// capped by the runner's limit and concurrent), output_limit 4 MiB. The
// tokens are returned in runner order.
func LoadConfig(path string) (Config, []string, error) {
	cfg := DefaultConfig()
	if err := conffile.Load(path, &cfg, 1); err != nil {
		return cfg, nil, err
	}
	if cfg.Concurrent == 0 {
		cfg.Concurrent = DefaultConcurrent
	}
	tokens, err := cfg.resolveRunners()
	return cfg, tokens, err
}

// resolveRunners reads the tokens and fills the runner defaults.
func (c *Config) resolveRunners() ([]string, error) {
	tokens := make([]string, len(c.Runners))
	names := map[string]bool{}
	for i := range c.Runners {
		r := &c.Runners[i]
		b, err := os.ReadFile(r.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%w: runners[%d].token_file: %w", ErrConfig, i, err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return nil, fmt.Errorf("%w: runners[%d].token_file %s is empty", ErrConfig, i, r.TokenFile)
		}
		tokens[i] = tok
		if r.Name == "" {
			r.Name = gitlab.ShortToken(tok)
		}
		if names[r.Name] {
			return nil, fmt.Errorf("%w: runners[%d]: name %q used twice", ErrConfig, i, r.Name)
		}
		names[r.Name] = true
		if r.RequestConcurrency == 0 {
			r.RequestConcurrency = DefaultLoops(r.Limit, c.Concurrent, len(c.Runners))
		}
		if r.OutputLimit == 0 {
			r.OutputLimit = DefaultOutputLimit
		}
	}
	return tokens, nil
}

// validateHubURLs checks [hub] urls: https base URLs, no two alike, and
// not beside url.
func (c *Config) validateHubURLs(bad func(string, ...any)) {
	if c.Hub.URL != "" && len(c.Hub.URLs) > 0 {
		bad("hub.url and hub.urls are both set: list every instance in urls (the enrolled hub among them)")
	}
	seen := map[string]bool{}
	for _, s := range c.Hub.URLs {
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			bad("hub.urls: %q: want https://host[:port]", s)
			continue
		}
		k := strings.TrimRight(s, "/")
		if seen[k] {
			bad("hub.urls: %q is listed twice", s)
		}
		seen[k] = true
	}
}

// HubURLs returns the hub instances the relay uses, in order: [hub]
// urls, or else the enrolled hub URL alone.
func (c *Config) HubURLs(enrolled string) []string {
	if len(c.Hub.URLs) == 0 {
		return []string{enrolled}
	}
	out := make([]string, len(c.Hub.URLs))
	for i, u := range c.Hub.URLs {
		out[i] = strings.TrimRight(u, "/")
	}
	return out
}
