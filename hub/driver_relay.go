package hub

import (
	"context"

	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/sched"
)

// RelaySender sends frames to a relay's session; *session.RelaySession
// implements it. Send must not block.
type RelaySender interface {
	Send(m client.RelayMessage) error
}

// RelayConnected records that relay's session is up (a new session each
// time): its tickets wait for the session's first heartbeat (ARB-12,
// ARB-40). Reservation requests of a relay without a session get 503
// unavailable (API-21).
func (d *Driver) RelayConnected(ctx context.Context, relay string, s RelaySender) error {
	return d.ask(ctx, relayUp{relay, s})
}

func (e relayUp) run(d *Driver) {
	r := d.relayRecord(e.relay)
	if !r.up {
		d.met.add("vk_hub_relays_connected", 1)
	}
	r.up, r.send = true, e.send
	r.noWork = false
	if v, ok := e.send.(interface{ NewWorkAllowed() bool }); ok && !v.NewWorkAllowed() {
		r.noWork = true // RSESS-11: a version-1 relay keeps its session but takes no new work
	}
	d.sessions++
	d.exec(d.step(sched.RelayUp{Relay: r.id, Session: d.sessions}))
	d.log.Info("relay connected", logkey.RelayID, e.relay)
}

// RelayDisconnected records that relay's session ended: its unclaimed
// tickets end (ARB-03).
func (d *Driver) RelayDisconnected(ctx context.Context, relay string) error {
	return d.ask(ctx, relayDown{relay})
}

func (e relayDown) run(d *Driver) {
	r := d.relays[e.relay]
	if r == nil || !r.up {
		return
	}
	r.up, r.send = false, nil
	d.met.add("vk_hub_relays_connected", -1)
	d.exec(d.step(sched.RelayDown{Relay: r.id}))
	d.log.Info("relay disconnected", logkey.RelayID, e.relay)
}

func (d *Driver) relayRecord(relay string) *relayRec {
	r := d.relays[relay]
	if r == nil {
		r = &relayRec{name: relay, id: d.ids.relay(relay), runners: map[string]runnerRec{}}
		d.relays[relay] = r
	}
	return r
}

// RelayFrame handles one state-changing frame of relay's session: its
// report (inventory) or heartbeat. A report is answered with the GitLab
// server's approval status (RSESS-07).
func (d *Driver) RelayFrame(ctx context.Context, relay string, m client.RelayMessage) error {
	return d.ask(ctx, relayMsg{relay, m})
}

func (e relayMsg) run(d *Driver) {
	r := d.relayRecord(e.relay)
	for _, handle := range relayFrames {
		if handle(d, r, e.msg) {
			return
		}
	}
	// Other frames change nothing in the driver and, unlike a node's, are
	// not logged.
}

// relayFrames handles the relay frames that change the driver's state,
// one entry per frame type (see [onFrame]); [Driver.RelayFrame] tries
// them in turn.
var relayFrames = []func(*Driver, *relayRec, any) bool{
	onFrame((*Driver).relayReport),
	onFrame((*Driver).relayHeartbeat),
}

func (d *Driver) relayReport(r *relayRec, rep client.RelayReport) {
	r.report = &rep
	for _, rr := range rep.Runners {
		if !rr.TokenAccepted {
			d.log.Warn("GitLab refused this runner's token; the runner takes no work until it is registered again",
				logkey.RelayID, r.name, logkey.RunnerID, rr.Name)
		}
	}
	d.relayInventory(r, rep)
	d.sendServerStatus(r) // RSESS-07
}

// relayInventory gives the core the relay's runners with their tenants
// under the policy in force.
func (d *Driver) relayInventory(r *relayRec, rep client.RelayReport) {
	inv := sched.RelayInventory{Relay: r.id, Concurrent: rep.Concurrent}
	runners := map[string]runnerRec{}
	newProd := false
	for _, rr := range rep.Runners {
		id, minted := d.ids.runner(r.name, rr.Name)
		tenant, prod := policyTenantOf(d.policy, r.name, rr.Name)
		if minted && prod {
			newProd = true
		}
		runners[rr.Name] = runnerRec{id: id, tenant: tenant, placement: rr.Placement}
		inv.Runners = append(inv.Runners, sched.RunnerInfo{Runner: id, Tenant: d.ids.tenant(tenant),
			Placement: placementToSched(rr.Placement), Limit: rr.Limit, RequestConcurrency: max(rr.RequestConcurrency, 1)})
	}
	r.runners = runners
	if newProd {
		d.exec(d.step(sched.PolicyChanged{Policy: d.schedPolicy()}))
	}
	d.exec(d.step(inv))
}

func (d *Driver) relayHeartbeat(r *relayRec, hb client.RelayHeartbeat) {
	r.states = make(map[string]client.RunnerState, len(hb.Runners))
	for _, rh := range hb.Runners {
		r.states[rh.Name] = rh.State
	}
	ev := heartbeatToSched(r.id, hb, func(name string) (sched.RunnerID, bool) {
		rr, ok := r.runners[name]
		return rr.id, ok
	})
	d.exec(d.step(ev))
}
