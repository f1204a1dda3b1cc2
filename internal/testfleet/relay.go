package testfleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/relay"
)

// Pool is the node pool every fleet runner places its jobs in; the fleet
// puts every node in it (`vk-hub nodes pools <id> ci`).
const Pool = "ci"

// RunnerName is the name of each relay's one runner.
const RunnerName = "runner"

// Relay is one tenant's relay: a real vk-gitlab (relay.Run) on its state
// dir, reaching the hub and its GitLab through its own [Link]s.
//
//	running ──Kill──▶ killed ──Restart──▶ running
type Relay struct {
	// ID is the relay's enrolled ID; Dir its state dir.
	ID, Dir string

	t       *Tenant
	cfg     relay.Config
	tokens  []string
	hubLink *Link
	glLink  *Link

	mu     sync.Mutex
	cancel context.CancelFunc // nil while stopped; guarded by mu
	done   chan error         // Run's result; guarded by mu
}

func (f *Fleet) addRelay(ctx context.Context, t *Tenant) (*Relay, error) {
	r := &Relay{Dir: filepath.Join(f.dir, "relays", t.Spec.Name), t: t}
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return nil, err
	}
	var err error
	if r.hubLink, err = f.hub.newLink(); err != nil {
		return nil, err
	}
	if r.glLink, err = NewLink(hostPort(t.GitLab.URL())); err != nil {
		return nil, err
	}
	// `vk-hub token create --kind gitlab`, then `vk-gitlab join`.
	tok, err := f.hub.token(ctx, hubclient.KindGitLab)
	if err != nil {
		return nil, err
	}
	e, _, err := hubclient.JoinAndSave(ctx, r.Dir, hubclient.JoinOptions{
		HubURL: "https://" + r.hubLink.Addr(), Token: tok, CAPEM: f.hub.CAPEM(),
		Name: "relay-" + t.Spec.Name, Kind: hubclient.KindGitLab,
	})
	if err != nil {
		return nil, fmt.Errorf("testfleet: relay %s join: %w", t.Spec.Name, err)
	}
	r.ID = e.ID
	tokenFile := filepath.Join(r.Dir, "runner.token")
	if err := os.WriteFile(tokenFile, []byte(t.GitLab.RunnerToken()+"\n"), 0o600); err != nil {
		return nil, err
	}
	cfg := relay.DefaultConfig()
	cfg.GitLab.URL = "http://" + r.glLink.Addr()
	cfg.StateDir = r.Dir
	cfg.Concurrent = t.Spec.Concurrent
	cfg.ShutdownTimeout = 1
	env := t.Spec.Envelope
	cfg.Runners = []relay.RunnerConfig{{
		Name: RunnerName, TokenFile: tokenFile, Pool: Pool,
		Envelope:           relay.EnvelopeConfig{Mem: env.Mem, CPUs: env.CPUs, Disk: env.Disk},
		RequestConcurrency: t.Spec.RequestConcurrency,
	}}
	if adjust := f.opts.Relay; adjust != nil {
		adjust(f, r, &cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r.cfg = cfg
	r.tokens = []string{t.GitLab.RunnerToken()}
	r.start()
	return r, nil
}

func hostPort(url string) string {
	for _, p := range []string{"http://", "https://"} {
		if len(url) > len(p) && url[:len(p)] == p {
			return url[len(p):]
		}
	}
	return url
}

func (r *Relay) start() {
	ctx, cancel := context.WithCancel(r.t.f.ctx)
	done := make(chan error, 1)
	log := r.t.f.log.With("component", "relay", "tenant", r.t.Spec.Name)
	opt := relay.Options{PlaceWithinSecs: r.t.Spec.PlaceWithinSecs}
	var err error
	if w := r.t.f.opts.RelayHub; w != nil {
		var hc *hubclient.Client
		if hc, err = r.hubClient(log); err == nil {
			opt.Hub = w(r.t.Spec.Name, hc)
		}
	}
	go func() {
		if err != nil {
			done <- err
			return
		}
		done <- relay.Run(ctx, r.cfg, r.tokens, log, opt)
	}()
	r.mu.Lock()
	r.cancel, r.done = cancel, done
	r.mu.Unlock()
}

// hubClient builds the relay's client of the hub API from its enrolment,
// as vk-gitlab does when no test gives one.
func (r *Relay) hubClient(log *slog.Logger) (*hubclient.Client, error) {
	e, err := hubclient.LoadEnrolment(r.Dir)
	if err != nil {
		return nil, fmt.Errorf("testfleet: relay %s: %w", r.t.Spec.Name, err)
	}
	cfg := e.Config()
	cfg.Log = log
	return hubclient.New(cfg)
}

// Config returns the relay's configuration.
func (r *Relay) Config() relay.Config { return r.cfg }

// Running reports whether the relay runs (not killed, not stopped).
func (r *Relay) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancel != nil
}

// ErrRelayStuck is returned by [Relay.Kill] when relay.Run did not return
// within [KillWait] of its context ending (the relay's shutdown_timeout is
// 1 s in a fleet): a relay bug, since Run must stop when its context ends
// (STYLE C7, RELAY-17/18). The harness then lets the stuck relay reach the
// hub and GitLab until it returns, so that two relays never share a state
// dir.
var ErrRelayStuck = errors.New("testfleet: relay.Run did not return after its context ended")

// KillWait is how long [Relay.Kill] waits for relay.Run to return.
const KillWait = 10 * time.Second

// Kill stops the relay without a graceful shutdown: its links to the hub
// and to GitLab are cut and blocked first (requests in flight die, nothing
// more reaches either side), then its context ends. What it wrote to its
// state files stays for [Relay.Restart] (RELAY-09). It returns
// ErrRelayStuck (wrapped) when Run does not return within KillWait.
func (r *Relay) Kill() error {
	r.hubLink.Block()
	r.glLink.Block()
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel, r.done = nil, nil
	r.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case err := <-done:
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		return err
	case <-time.After(KillWait):
	}
	// Let it finish what it insists on, so it is gone before a restart.
	r.hubLink.Heal()
	r.glLink.Heal()
	r.t.f.log.Error("relay did not stop after its context ended; letting it reach the hub and GitLab until it does",
		"tenant", r.t.Spec.Name, "waited", KillWait)
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		err = errors.New("still running after 2 more minutes")
	}
	r.hubLink.Block()
	r.glLink.Block()
	return fmt.Errorf("%w (%s; it returned %v once let through)", ErrRelayStuck, r.t.Spec.Name, err)
}

// Restart starts a killed relay again on its state dir.
func (r *Relay) Restart(ctx context.Context) error {
	if r.Running() {
		return nil
	}
	r.start()
	r.hubLink.Heal()
	r.glLink.Heal()
	return nil
}

// CutSession resets the relay's connections to the hub once.
func (r *Relay) CutSession() { r.hubLink.Cut() }

func (r *Relay) stop() error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel, r.done = nil, nil
	r.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	err := <-done
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func (r *Relay) stopGraceful(context.Context) error {
	err := r.stop()
	r.hubLink.Close()
	r.glLink.Close()
	return err
}

// Instance is the relay's GitLab server as the hub names it in approvals
// (`vk-hub projects approve <instance> …`): the host:port of its GitLab
// URL.
func (r *Relay) Instance() string { return hostPort(r.cfg.GitLab.URL) }

// HubLink is the relay's link to the hub: what its hub URL reaches.
func (r *Relay) HubLink() *Link { return r.hubLink }

// HubURL is the hub URL the relay enrolled with (through its link).
func (r *Relay) HubURL() string { return "https://" + r.hubLink.Addr() }
