package hub

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/vk-ci/vk/hub/regtoken"
	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/internal/conffile"
	"github.com/vk-ci/vk/internal/connlimit"
	"github.com/vk-ci/vk/proto/client"
)

// ConfigVersion is the only `version` this build reads in hub.toml and in a
// capacity policy file.
const ConfigVersion = 1

// Defaults of [Config] (docs/defaults.md, docs/hub.md).
const (
	DefaultAddr              = "127.0.0.1:8443"
	DefaultStateDir          = "/var/lib/vk-hub"
	DefaultSkewSecs          = 300
	DefaultTickMillis        = 250
	DefaultShutdownGraceSecs = 10
	DefaultMaxBodyBytes      = 2 << 20
	DefaultJobLostAfterSecs  = 300
	DefaultPlaceWithinSecs   = 300
	DefaultTenant            = "default"
	// DefaultImmediateWaitMillis is immediate_wait_ms's default (API-17).
	DefaultImmediateWaitMillis = 1000
)

// ErrConfig is wrapped by every error [Config.Validate] returns.
var ErrConfig = errors.New("hub: invalid config")

// Config is vk-hub's configuration (hub.toml, STYLE C13): defaults from
// [DefaultConfig], then the file (decoded strictly by [LoadConfig]), then
// flags. Every field documents its default; docs/hub.md is the operator's
// reference.
type Config struct {
	// Version must be 1.
	Version int `toml:"version"`
	// Addr is the client API and session listener, host:port. Default
	// 127.0.0.1:8443. Port 0 picks a free port (tests).
	Addr string `toml:"addr"`
	// StateDir holds the store, job output and the self-made PKI. Default
	// /var/lib/vk-hub. Created 0700 when missing.
	StateDir string `toml:"state_dir"`
	// Store is where records live ([store] table, [StoreConfig]): bbolt
	// in <state_dir>/hub.db by default, or PostgreSQL.
	Store StoreConfig `toml:"store"`
	// UIURL is the base URL of the hub's web UI, used to build
	// approval_url (API-56); empty means the URL of the [ui] listener
	// when it is on (https://<ui.addr as bound>), else no approval_url.
	// Set it when the UI is reached through another name (a wildcard
	// ui.addr, a proxy).
	UIURL string `toml:"ui_url"`
	// UI serves the operator web UI (hub/ui, docs/ui.md) on its own TLS
	// listener. Default off.
	UI UIConfig `toml:"ui"`
	// TLS names the serving certificate; empty means the self-made CA in
	// <state_dir>/pki.
	TLS TLSConfig `toml:"tls"`
	// Auth configures request signature checks.
	Auth AuthConfig `toml:"auth"`
	// Limits bounds outstanding reservations (API-20) and request sizes.
	Limits LimitsConfig `toml:"limits"`
	// Sessions configures node liveness.
	Sessions SessionsConfig `toml:"sessions"`
	// Jobs configures job defaults.
	Jobs JobsConfig `toml:"jobs"`
	// Approvals configures operator approval of GitLab servers and
	// projects (API-49, OPS-06).
	Approvals ApprovalsConfig `toml:"approvals"`
	// CapacityPolicyFile is a TOML file holding the capacity policy
	// (`version = 1` plus the keys of [PolicyConfig]); empty means the
	// inline [capacity_policy] table, or an empty policy.
	CapacityPolicyFile string `toml:"capacity_policy_file"`
	// CapacityPolicy is the capacity policy inline (DECISIONS 11). At most
	// one of it and CapacityPolicyFile may be set.
	CapacityPolicy *PolicyConfig `toml:"capacity_policy"`
	// ImmediateWaitMillis (API-17): a queue=true reservation whose offers
	// all went out at once is held this long, in milliseconds, for the
	// node's acceptance, then answered 201 with the grant, else 202 with
	// the ticket. Default 1000; 0 answers 202 at once; at most 5000.
	ImmediateWaitMillis int `toml:"immediate_wait_ms"`
	// TickMillis is the scheduling core's tick period in milliseconds.
	// Default 250.
	TickMillis int `toml:"tick_ms"`
	// ShutdownGraceSecs bounds a graceful shutdown's wait for in-flight
	// requests, in seconds. Default 10.
	ShutdownGraceSecs int `toml:"shutdown_grace_secs"`
	// Trace is the workload trace ([trace] table, [wtrace.Config],
	// docs/replay.md): on by default under <state_dir>/trace.
	Trace wtrace.Config `toml:"trace"`
	// Registries are the registries the hub mints job registry tokens
	// for ([[registries]], [regtoken.Config], docs/hub.md): a job placed
	// on a node whose reported [registry] url matches one gets a token
	// for its own cache repository in its start (XFER-13, XFER-17).
	// Empty (the default) means no tokens: nodes keep caches with their
	// own credential (XFER-15).
	Registries []regtoken.Config `toml:"registries"`
}

// TLSConfig names an operator-provided serving certificate. Both or
// neither must be set. Names are extra DNS names or IPs the self-made
// serving certificate must cover (ignored with Cert/Key).
type TLSConfig struct {
	Cert  string   `toml:"cert"`
	Key   string   `toml:"key"`
	Names []string `toml:"names"`
}

// AuthConfig configures signature checks (AUTH-13).
type AuthConfig struct {
	// SkewSecs is the largest accepted |vk-time − now|, in seconds.
	// Default 300 (DECISIONS 10).
	SkewSecs int `toml:"skew_secs"`
}

// LimitsConfig bounds what a principal and the hub hold (API-20).
type LimitsConfig struct {
	// PerPrincipal bounds a principal's unended reservations. Default 256.
	PerPrincipal int `toml:"per_principal"`
	// PerHub bounds the hub's unended reservations. Default 4096.
	PerHub int `toml:"per_hub"`
	// MaxBodyBytes bounds a request body; larger is 413 too_large.
	// Default 2 MiB (a spec may be 512 KiB, API-35).
	MaxBodyBytes int64 `toml:"max_body_bytes"`

	// What an unauthenticated peer can make the hub hold (docs/security.md);
	// 0 means the default.

	// MaxConns caps the open connections of the API and session listener
	// (addr), node sessions included: keep it above the fleet's node count
	// plus the relays' concurrent requests. Past it new connections are
	// closed at accept. Default 40000.
	MaxConns int `toml:"max_conns"`
	// MaxUnauthPerPeer caps, per peer IP address, the connections of that
	// listener not yet authenticated (TLS handshake, headers and body
	// before the signature verified; a join throughout). Default 64.
	MaxUnauthPerPeer int `toml:"max_unauth_per_peer"`
	// HeaderTimeoutSecs bounds the TLS handshake and the read of a
	// request's headers, on both listeners. Default 10.
	HeaderTimeoutSecs int `toml:"header_timeout_secs"`
	// IdleTimeoutSecs closes an API connection that has had no request in
	// progress this long (clients keep signed connections alive, AUTH-14;
	// an unauthenticated connection is closed after its one answer
	// anyway). Default 90.
	IdleTimeoutSecs int `toml:"idle_timeout_secs"`
	// BodySecsPerMiB bounds the read of a request body: this many seconds
	// per started MiB of its length (at least one MiB; a 2 MiB body gets
	// 8 s by default). Default 4.
	BodySecsPerMiB int `toml:"body_secs_per_mib"`
	// UnauthBodyBudgetBytes bounds the body bytes being read before their
	// requests are authenticated, over all untrusted peers (each request
	// reserves its declared length); past it a request answers 503
	// unavailable. Default 16 MiB.
	UnauthBodyBudgetBytes int64 `toml:"unauth_body_budget_bytes"`
	// UnauthBodyPerPeerBytes bounds one untrusted address's share of it.
	// Default 4 MiB.
	UnauthBodyPerPeerBytes int64 `toml:"unauth_body_per_peer_bytes"`
	// TrustedBodyBudgetBytes is the pool of addresses that sent a request
	// whose signature verified in the last 10 minutes (a relay's host):
	// strangers cannot spend it. Default 32 MiB.
	TrustedBodyBudgetBytes int64 `toml:"trusted_body_budget_bytes"`
	// MaxPendingHellos caps, per session endpoint, the sessions upgraded
	// but still before their hello. Default 256.
	MaxPendingHellos int `toml:"max_pending_hellos"`
}

// Defaults of the pre-authentication limits (docs/security.md).
const (
	DefaultMaxConns              = 40000
	DefaultMaxUnauthPerPeer      = 64
	DefaultHeaderTimeoutSecs     = 10
	DefaultIdleTimeoutSecs       = 90
	DefaultBodySecsPerMiB        = 4
	DefaultUnauthBodyBudgetBytes = 16 << 20
	DefaultUnauthBodyPerPeer     = 4 << 20
	DefaultTrustedBodyBudget     = 32 << 20
	DefaultMaxPendingHellos      = 256
	DefaultUIMaxConns            = 256
	DefaultUIMaxConnsPerPeer     = 32
)

func orDefault[T int | int64](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// connLimits are the API listener's caps.
func (l LimitsConfig) connLimits() connlimit.Limits {
	return connlimit.Limits{MaxConns: orDefault(l.MaxConns, DefaultMaxConns), MaxUnauthPerPeer: orDefault(l.MaxUnauthPerPeer, DefaultMaxUnauthPerPeer)}
}

// budget is the unauthenticated body budget's pools.
func (l LimitsConfig) budget() connlimit.BudgetLimits {
	return connlimit.BudgetLimits{General: orDefault(l.UnauthBodyBudgetBytes, DefaultUnauthBodyBudgetBytes),
		PerPeer: orDefault(l.UnauthBodyPerPeerBytes, DefaultUnauthBodyPerPeer), Trusted: orDefault(l.TrustedBodyBudgetBytes, DefaultTrustedBodyBudget)}
}

func (l LimitsConfig) headerTimeout() time.Duration {
	return time.Duration(orDefault(l.HeaderTimeoutSecs, DefaultHeaderTimeoutSecs)) * time.Second
}

func (l LimitsConfig) idleTimeout() time.Duration {
	return time.Duration(orDefault(l.IdleTimeoutSecs, DefaultIdleTimeoutSecs)) * time.Second
}

func (l LimitsConfig) bodyPerMiB() time.Duration {
	return time.Duration(orDefault(l.BodySecsPerMiB, DefaultBodySecsPerMiB)) * time.Second
}

// SessionsConfig configures node liveness (FAIL-16) and the periods the
// hub states in its session welcomes (STYLE C6).
type SessionsConfig struct {
	// NodeHeartbeatSecs is the base node heartbeat period, in seconds,
	// lengthened with the fleet by the session layer. Default 5.
	NodeHeartbeatSecs int `toml:"node_heartbeat_secs"`
	// UnreachableAfterMissed: a node is unreachable after this many
	// missed heartbeats. Default 3.
	UnreachableAfterMissed int `toml:"unreachable_after_missed"`
	// JobLostAfterSecs: a node whose session is gone this long loses its
	// jobs (they end lost). Default 300.
	JobLostAfterSecs int `toml:"job_lost_after_secs"`
}

// JobsConfig configures job defaults.
type JobsConfig struct {
	// PlaceWithinSecs is the place_within_secs of a submission that names
	// none (0). Default 300 (ARB-38).
	PlaceWithinSecs int `toml:"place_within_secs"`
}

// UIConfig configures the operator web UI's listener.
type UIConfig struct {
	// Addr is the UI's listener, host:port; it serves TLS with the hub's
	// certificate. Empty (the default) means no UI. Port 0 picks a free
	// port (tests).
	Addr string `toml:"addr"`
	// Token, when set, admits operators by HTTP Basic authentication
	// with this password (the user name goes to the audit log). Empty
	// means loopback peers only (an SSH tunnel). Never logged.
	Token string `toml:"token"`
	// User, when set with Token, is the only Basic user name accepted.
	User string `toml:"user"`
	// MaxConns caps the UI listener's open connections. Default 256.
	MaxConns int `toml:"max_conns"`
	// MaxConnsPerPeer caps the UI connections of one peer IP address (a
	// browser opens a handful). Default 32.
	MaxConnsPerPeer int `toml:"max_conns_per_peer"`
}

// connLimits are the UI listener's caps. The UI authenticates each
// request, not the connection, so every UI connection counts against its
// peer.
func (u UIConfig) connLimits() connlimit.Limits {
	return connlimit.Limits{MaxConns: orDefault(u.MaxConns, DefaultUIMaxConns), MaxUnauthPerPeer: orDefault(u.MaxConnsPerPeer, DefaultUIMaxConnsPerPeer)}
}

// ApprovalsConfig configures approvals.
type ApprovalsConfig struct {
	// Required: a relay's GitLab server and each project must be approved
	// by an operator (`vk-hub projects approve …`) before the hub takes
	// their work; a first sighting is recorded pending. Default false:
	// every server and project counts as approved.
	Required bool `toml:"required"`
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		Version:  ConfigVersion,
		Addr:     DefaultAddr,
		StateDir: DefaultStateDir,
		Auth:     AuthConfig{SkewSecs: DefaultSkewSecs},
		Limits: LimitsConfig{PerPrincipal: client.MaxUnendedPerPrincipal, PerHub: client.MaxUnendedPerHub, MaxBodyBytes: DefaultMaxBodyBytes,
			MaxConns: DefaultMaxConns, MaxUnauthPerPeer: DefaultMaxUnauthPerPeer, HeaderTimeoutSecs: DefaultHeaderTimeoutSecs,
			BodySecsPerMiB: DefaultBodySecsPerMiB, UnauthBodyBudgetBytes: DefaultUnauthBodyBudgetBytes, UnauthBodyPerPeerBytes: DefaultUnauthBodyPerPeer,
			TrustedBodyBudgetBytes: DefaultTrustedBodyBudget, MaxPendingHellos: DefaultMaxPendingHellos},
		UI:                UIConfig{MaxConns: DefaultUIMaxConns, MaxConnsPerPeer: DefaultUIMaxConnsPerPeer},
		Sessions:          SessionsConfig{NodeHeartbeatSecs: 5, UnreachableAfterMissed: 3, JobLostAfterSecs: DefaultJobLostAfterSecs},
		Jobs:              JobsConfig{PlaceWithinSecs: DefaultPlaceWithinSecs},
		TickMillis:        DefaultTickMillis,
		ShutdownGraceSecs: DefaultShutdownGraceSecs,

		ImmediateWaitMillis: DefaultImmediateWaitMillis,
	}
}

// LoadConfig reads path strictly over [DefaultConfig] (unknown keys, wrong
// types and a missing `version` are errors naming file, line and key), then
// validates. A missing file wraps conffile.ErrNoConfig.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	cfg.Version = 0
	if err := conffile.Load(path, &cfg, ConfigVersion); err != nil {
		return Config{}, err
	}
	if err := checkEmptyProjects(path, []string{"capacity_policy"}); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate lists every problem of c, each wrapping [ErrConfig]. It is pure.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...))
	}
	if c.Version != ConfigVersion {
		bad("version is %d, want %d", c.Version, ConfigVersion)
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		bad("addr %q: %v", c.Addr, err)
	}
	if c.StateDir == "" {
		bad("state_dir is empty")
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		bad("tls: set both cert and key, or neither")
	}
	if c.UIURL != "" && !strings.HasPrefix(c.UIURL, "https://") && !strings.HasPrefix(c.UIURL, "http://") {
		bad("ui_url %q is not an http(s) URL", c.UIURL)
	}
	if c.Auth.SkewSecs <= 0 {
		bad("auth.skew_secs must be > 0")
	}
	if c.Limits.PerPrincipal <= 0 || c.Limits.PerHub <= 0 {
		bad("limits.per_principal and limits.per_hub must be > 0")
	}
	if c.Limits.MaxBodyBytes < 1<<20 {
		bad("limits.max_body_bytes must be at least 1 MiB")
	}
	if c.Limits.MaxConns < 0 || c.Limits.MaxUnauthPerPeer < 0 || c.Limits.HeaderTimeoutSecs < 0 || c.Limits.IdleTimeoutSecs < 0 || c.Limits.BodySecsPerMiB < 0 ||
		c.Limits.UnauthBodyBudgetBytes < 0 || c.Limits.UnauthBodyPerPeerBytes < 0 || c.Limits.TrustedBodyBudgetBytes < 0 || c.Limits.MaxPendingHellos < 0 || c.UI.MaxConns < 0 || c.UI.MaxConnsPerPeer < 0 {
		bad("limits.max_conns, max_unauth_per_peer, header_timeout_secs, idle_timeout_secs, body_secs_per_mib, unauth_body_budget_bytes, max_pending_hellos and ui.max_conns, max_conns_per_peer must not be negative")
	}
	for name, b := range map[string]int64{"unauth_body_budget_bytes": c.Limits.UnauthBodyBudgetBytes,
		"unauth_body_per_peer_bytes": c.Limits.UnauthBodyPerPeerBytes, "trusted_body_budget_bytes": c.Limits.TrustedBodyBudgetBytes} {
		if b > 0 && b < c.Limits.MaxBodyBytes {
			bad("limits.%s must be at least limits.max_body_bytes", name)
		}
	}
	if c.Sessions.JobLostAfterSecs <= 0 || c.Sessions.NodeHeartbeatSecs <= 0 || c.Sessions.UnreachableAfterMissed <= 0 {
		bad("sessions.node_heartbeat_secs, unreachable_after_missed and job_lost_after_secs must be > 0")
	}
	if c.Jobs.PlaceWithinSecs <= 0 {
		bad("jobs.place_within_secs must be > 0")
	}
	if c.TickMillis <= 0 || c.TickMillis > 10000 {
		bad("tick_ms must be in 1..10000")
	}
	if c.ImmediateWaitMillis < 0 || c.ImmediateWaitMillis > 5000 {
		bad("immediate_wait_ms must be in 0..5000")
	}
	if c.ShutdownGraceSecs < 0 {
		bad("shutdown_grace_secs must be >= 0")
	}
	if c.UI.Addr != "" {
		if _, _, err := net.SplitHostPort(c.UI.Addr); err != nil {
			bad("ui.addr %q: %v", c.UI.Addr, err)
		}
	}
	if c.UI.User != "" && c.UI.Token == "" {
		bad("ui.user needs ui.token")
	}
	c.Store.validate(bad)
	if err := c.Trace.Validate(); err != nil {
		bad("%v", err)
	}
	for i, r := range c.Registries {
		if err := r.Validate(i); err != nil {
			bad("%v", err)
		}
	}
	if c.CapacityPolicyFile != "" && c.CapacityPolicy != nil {
		bad("set capacity_policy_file or [capacity_policy], not both")
	}
	if c.CapacityPolicy != nil {
		if err := validatePolicy(c.CapacityPolicy); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Config) tick() time.Duration  { return time.Duration(c.TickMillis) * time.Millisecond }
func (c *Config) skew() time.Duration  { return time.Duration(c.Auth.SkewSecs) * time.Second }
func (c *Config) grace() time.Duration { return time.Duration(c.ShutdownGraceSecs) * time.Second }
func (c *Config) lostAfter() time.Duration {
	return time.Duration(c.Sessions.JobLostAfterSecs) * time.Second
}
