package node

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/node/exec"
	"github.com/vk-ci/vk/node/regproxy"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
)

// Network modes of [MicroVMConfig.NetMode].
const (
	// NetModeNone: a job's VM has no network but the one to its
	// services' VMs (none at all without services).
	NetModeNone = "none"
	// NetModeSwitch: a job's VM also gets the network whose only way out
	// is the job's guest registry proxy at registry.vk (XFER-18..23).
	NetModeSwitch = regproxy.NetModeSwitch
)

// NetModeVar is the job variable asking for a network mode other than
// the node's [MicroVMConfig.NetMode], one of [MicroVMConfig.NetModes].
const NetModeVar = "VK_NET_MODE"

// netMode is [MicroVMConfig.NetMode] or its default, "none".
func (m MicroVMConfig) netMode() string {
	if m.NetMode == "" {
		return NetModeNone
	}
	return m.NetMode
}

// wireVMNet gives b the microvm backend's net.mode from
// [executor.microvm] net_mode and the builder of each job's guest
// registry proxy.
func (a *Agent) wireVMNet(b *backends) {
	b.netMode = a.cfg.Executor.MicroVM.netMode()
	b.netModes = a.cfg.Executor.MicroVM.NetModes
	b.registry = func(s *dispatch.Start, received time.Time) jobRegistry {
		return jobProxy(a.cfg.Registry, s, received, a.clk, a.log)
	}
}

// jobRegistry is what a job's VM gets on its switch network: its guest
// registry proxy and the grants its steps see in VK_REGISTRY_NAMESPACES.
type jobRegistry struct {
	proxy      http.Handler
	namespaces []regproxy.Namespace
}

// jobProxy builds the guest registry proxy of start s against the node's
// registry reg. It forwards only with the registry token the hub minted
// for the job (the start's cache repository token), injecting it on every
// request; the node's own credential (reg.Username, reg.Password) is never
// given to it, under either guest_credential mode (XFER-18). A start
// without a token gets a proxy refusing everything (XFER-19), and so does
// a node without a usable [registry] url. The token's lifetime counts from
// received, when the node received the start, as for the job's cache
// stages; not from when the executor is chosen, which is later by as
// long as the job waited for its size on the ledger. No lifetime starts
// afresh: a redelivered start is answered from the journal and never run
// again, and a job the node was running when it stopped ends interrupted
// when it restarts, so no proxy is built for a start of an earlier run
// (which is why the journal keeps no receipt time). The steps' namespaces
// are the token's one grant, its cache repository, read and write; the
// start carries no finer list.
func jobProxy(reg RegistryConfig, s *dispatch.Start, received time.Time, clk clock.Clock, log *slog.Logger) jobRegistry {
	if s != nil {
		log = log.With(logkey.JobID, s.Job)
	}
	if s == nil || s.Cache == nil || s.Cache.Token == "" {
		return jobRegistry{proxy: regproxy.Refusing(regproxy.ErrNoToken, log)}
	}
	p, err := regproxy.New(regproxy.Config{Upstream: reg.URL, Token: regproxy.Token(s.Cache.Token),
		Expires: tokenExpiry(s.Cache, received), Clock: clk, Log: log})
	if err != nil {
		log.Warn("the job's registry proxy refuses everything", logkey.Err, err)
		return jobRegistry{proxy: regproxy.Refusing(err, log)}
	}
	r := jobRegistry{proxy: p}
	if ns := (regproxy.Namespace{Prefix: s.Cache.Repository, Rights: "rw"}); ns.Validate() == nil {
		r.namespaces = []regproxy.Namespace{ns}
	}
	return r
}

// jobNetMode is j's network mode: its VK_NET_MODE when it sets one the
// node allows ([executor.microvm] net_modes), else the node's net_mode.
// A mode not allowed is a configuration error naming what is; the node's
// mode comes back with it.
func (b *backends) jobNetMode(j *job.CiJob) (string, error) {
	var asked string
	for _, v := range j.Variables {
		if v.Key == NetModeVar && !v.File {
			asked = v.Value
		}
	}
	if asked == "" || asked == b.netMode {
		return b.netMode, nil
	}
	if !slices.Contains(b.netModes, asked) {
		allowed := b.netModes
		if len(allowed) == 0 {
			allowed = []string{b.netMode}
		}
		return b.netMode, fmt.Errorf("%w: %s=%q: this node allows net modes %q (its [executor.microvm] net_modes; net_mode %q unless a job asks)",
			exec.ErrConfiguration, NetModeVar, asked, allowed, b.netMode)
	}
	return asked, nil
}
