package hub

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/vk-ci/vk/hub/api"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/sched"
)

// The driver implements api.Backend: each method hands a request to the
// owner loop, which steps the core, and waits (long polls) off it.
var _ api.Backend = (*Driver)(nil)

// renewTimeout bounds the wait for the node's answer to a renew.
const renewTimeout = 5 * time.Second

func verdictError(v sched.Verdict) error {
	msg := v.Message
	switch v.Code {
	case sched.VerdictOK, sched.VerdictPending:
		return nil
	case sched.VerdictConflict:
		return api.Errorf(client.CodeConflict, "%s", cmp.Or(msg, "conflict"))
	case sched.VerdictGone:
		return api.Errorf(client.CodeReservationGone, "%s", cmp.Or(msg, "reservation gone"))
	case sched.VerdictNotFound:
		return api.Errorf(client.CodeNotFound, "%s", cmp.Or(msg, "not found"))
	case sched.VerdictForbidden:
		return api.Errorf(client.CodeForbidden, "%s", cmp.Or(msg, "forbidden"))
	case sched.VerdictInvalid:
		return api.Errorf(client.CodeInvalid, "%s", cmp.Or(msg, "invalid"))
	case sched.VerdictUnavailable:
		return &api.Error{Code: client.CodeUnavailable, Msg: cmp.Or(msg, "unavailable"), RetryAfter: 1}
	}
	return &api.Error{Code: client.CodeInternal, Msg: "unexpected scheduler verdict " + v.Code.String()}
}

// errOldRelay refuses new work to a relay whose session is below version 2
// (API-48, RSESS-11).
var errOldRelay = api.Errorf(client.CodeForbidden, "relay session below protocol 2 may not ask for new work; upgrade vk-gitlab")

func notFound(what string) error { return api.Errorf(client.CodeNotFound, "no such %s", what) }

// wait blocks until ch is closed, the timer fires or ctx ends; it reports
// whether ch was closed.
func (d *Driver) wait(ctx context.Context, ch <-chan struct{}, deadline time.Time) (woken bool, err error) {
	left := deadline.Sub(d.now())
	if left <= 0 {
		return false, nil
	}
	t := d.clk.NewTimer(left)
	defer t.Stop()
	select {
	case <-ch:
		return true, nil
	case <-t.C():
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// Capacity implements api.Backend (API-02, API-13, API-14).
func (d *Driver) Capacity(ctx context.Context, p api.Principal, req client.CapacityRequest, wait time.Duration) (client.Capacity, error) {
	deadline := d.now().Add(wait)
	for {
		r := &capacityReq{principal: p.ID, placement: req.Placement}
		if err := d.call(ctx, r); err != nil {
			return client.Capacity{}, err
		}
		if req.After == 0 || r.c.Revision > req.After || wait <= 0 {
			return r.c, nil
		}
		woken, err := d.wait(ctx, r.wake, deadline)
		if err != nil {
			return client.Capacity{}, err
		}
		if !woken {
			return r.c, nil
		}
	}
}

// capacityReq asks for the capacity answer now and the channel closed
// when it changes.
type capacityReq struct {
	reply
	principal string
	placement client.Placement
	c         client.Capacity
	wake      <-chan struct{}
}

func (r *capacityReq) run(d *Driver) {
	if rr := d.relays[r.principal]; rr != nil && rr.noWork {
		r.err = errOldRelay
		return
	}
	r.c = client.Capacity{Revision: d.capRev, Fits: d.core.Fits(placementToSched(r.placement))}
	r.wake = d.capWake
}

// Reserve implements api.Backend (API-03, API-16..21).
func (d *Driver) Reserve(ctx context.Context, p api.Principal, req client.ReservationRequest, wait time.Duration) (*client.ReservationGrant, string, error) {
	r := &reserveReq{principal: p.ID, req: req}
	if err := d.call(ctx, r); err != nil {
		return nil, "", err
	}
	wire := r.wire
	if req.Queue {
		// API-17: a grant needs a node's answer. When every offer went out
		// at once, hold the answer briefly for it: 201 with the grant if
		// it comes, else 202 with the ticket (which stays queued).
		if !r.immediate || d.cfg.ImmediateWaitMillis <= 0 {
			return nil, wire, nil
		}
		g, err := d.Ticket(ctx, p, wire, time.Duration(d.cfg.ImmediateWaitMillis)*time.Millisecond)
		if err != nil || g == nil {
			return nil, wire, nil // the ticket answers for itself from now on
		}
		return g, wire, nil
	}
	g, err := d.Ticket(ctx, p, wire, wait)
	if err == nil && g != nil {
		return g, wire, nil
	}
	// API-18: nothing in time; give the ticket up.
	_ = d.CancelTicket(context.WithoutCancel(ctx), p, wire)
	if err != nil && !errors.Is(err, context.Canceled) {
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != client.CodeReservationGone {
			return nil, "", err
		}
	}
	return nil, "", &api.Error{Code: client.CodeNoCapacity, Msg: "no node accepted the reservation in time", RetryAfter: 5}
}

// reserveReq queues a ticket: its wire ID, and whether every offer went
// out at once.
type reserveReq struct {
	reply
	principal string
	req       client.ReservationRequest
	wire      string
	immediate bool
}

func (r *reserveReq) run(d *Driver) {
	r.wire, r.err = d.queueTicket(r.principal, r.req)
	if id, _, ok := parseTicket(r.wire, d.epoch); r.err == nil && ok {
		v, _ := d.core.Ticket(id)
		r.immediate = v.Immediate
	}
}

// queueTicket queues a ticket of a connected relay's reported runner
// (API-21); the core enforces the limits (API-20).
func (d *Driver) queueTicket(principal string, req client.ReservationRequest) (string, error) {
	r := d.relays[principal]
	if r == nil || !r.up {
		return "", &api.Error{Code: client.CodeUnavailable, Msg: "relay session not connected", RetryAfter: 1}
	}
	if r.noWork {
		return "", errOldRelay
	}
	rr, ok := r.runners[req.Runner]
	if !ok {
		return "", &api.Error{Code: client.CodeUnavailable, Msg: "runner " + req.Runner + " not in the relay's session report", RetryAfter: 1}
	}
	if !samePlacement(rr.placement, req.Placement) {
		return "", api.Errorf(client.CodeForbidden, "placement differs from runner %s's reported placement", req.Runner)
	}
	d.nextTk++
	id := sched.TicketID(d.nextTk)
	acts := d.step(sched.TicketQueued{Ticket: id, Runner: rr.id})
	if err := limitError(verdictOf(acts)); err != nil {
		d.exec(acts)
		return "", err
	}
	d.tickets[id] = &ticketRec{id: id, owner: principal, runner: req.Runner, wake: make(chan struct{}), queued: d.now()}
	d.met.add("vk_hub_tickets_total", 1)
	d.exec(acts)
	return ticketWire(d.epoch, id), nil
}

// limitError is verdictError with the retry hint of the relay's and the
// hub's limits: 5 s, as a place there frees with a job, not a poll.
func limitError(v sched.Verdict) error {
	err := verdictError(v)
	if v.Code == sched.VerdictUnavailable && (v.Message == sched.MsgRelayLimit || v.Message == sched.MsgHubLimit) {
		err.(*api.Error).RetryAfter = 5
	}
	return err
}

// Ticket implements api.Backend (API-04, API-22..25).
func (d *Driver) Ticket(ctx context.Context, p api.Principal, ticket string, wait time.Duration) (*client.ReservationGrant, error) {
	id, same, ok := parseTicket(ticket, d.epoch)
	if !ok {
		return nil, api.Errorf(client.CodeInvalid, "malformed ticket ID %q", ticket)
	}
	if !same {
		return nil, api.Errorf(client.CodeReservationGone, "ticket unknown (issued before the hub restarted)")
	}
	deadline := d.now().Add(wait)
	for {
		r := &pollReq{principal: p.ID, id: id}
		if err := d.call(ctx, r); err != nil || r.g != nil || wait <= 0 {
			return r.g, err
		}
		woken, werr := d.wait(ctx, r.wake, deadline)
		if werr != nil {
			return nil, werr
		}
		if !woken {
			wait = 0 // API-12: answer what a request without wait would
		}
	}
}

// pollReq polls a ticket: its grant, or the channel closed when it
// changes.
type pollReq struct {
	reply
	principal string
	id        sched.TicketID
	g         *client.ReservationGrant
	wake      <-chan struct{}
}

func (r *pollReq) run(d *Driver) {
	t := d.tickets[r.id]
	if t != nil && t.owner != r.principal {
		r.err = notFound("ticket") // API-25
		return
	}
	if r.err = verdictError(d.stepExec(sched.TicketPolled{Ticket: r.id})); r.err != nil {
		return
	}
	view, ok := d.core.Ticket(r.id)
	switch {
	case !ok || t == nil:
		r.err = api.Errorf(client.CodeReservationGone, "ticket ended")
	case view.Grant != nil:
		g := grantFromSched(*view.Grant, d.ids.nodeName(view.Grant.Node))
		r.g = &g
	default:
		r.wake = t.wake
	}
}

// CancelTicket implements api.Backend (API-24, API-25).
func (d *Driver) CancelTicket(ctx context.Context, p api.Principal, ticket string) error {
	id, same, ok := parseTicket(ticket, d.epoch)
	if !ok {
		return api.Errorf(client.CodeInvalid, "malformed ticket ID %q", ticket)
	}
	if !same {
		return nil
	}
	return d.call(ctx, &cancelTicketReq{principal: p.ID, id: id})
}

type cancelTicketReq struct {
	reply
	principal string
	id        sched.TicketID
}

func (r *cancelTicketReq) run(d *Driver) {
	if t := d.tickets[r.id]; t != nil && t.owner != r.principal {
		r.err = notFound("ticket")
		return
	}
	r.err = verdictError(d.stepExec(sched.TicketCancelled{Ticket: r.id}))
}

// admission is an admission as the core holds it, with the names of its
// relay and runner.
type admission struct {
	id sched.AdmissionID
	sched.AdmissionView
	owner, runner string
}

// admission returns the core's admission id; ok false when the core does
// not know it.
func (d *Driver) admission(id sched.AdmissionID) (admission, bool) {
	v, ok := d.core.Admission(id)
	if !ok {
		return admission{}, false
	}
	k := d.ids.runnerOf(v.Runner)
	return admission{id: id, AdmissionView: v, owner: k.relay, runner: k.name}, true
}

// admFor resolves an admission or reservation wire ID to an admission of
// principal. A zero ID with err nil: unknown to this hub; a known ID
// with ok false: one the core no longer holds.
func (d *Driver) admFor(principal, id string) (aid sched.AdmissionID, a admission, ok bool, err error) {
	aid, ok = parseAdmission(id)
	if !ok {
		rid, rok := parseReservation(id)
		if !rok {
			return 0, admission{}, false, api.Errorf(client.CodeInvalid, "malformed admission or reservation ID %q", id)
		}
		aid, _ = d.core.ReservationAdmission(rid)
	}
	a, ok = d.admission(aid)
	if ok && a.owner != principal {
		return 0, admission{}, false, notFound("admission") // API-50
	}
	return aid, a, ok, nil
}

// admissionRecord is the persisted record of a claimed admission (ARB-04,
// DECISIONS 6), job its job's wire ID ("" before one).
func (d *Driver) admissionRecord(a admission, job string) store.Admission {
	tenant, _ := policyTenantOf(d.policy, a.owner, a.runner)
	pl := client.Placement{Envelope: envelopeFromSched(a.Envelope)}
	if r := d.relays[a.owner]; r != nil {
		if rr, ok := r.runners[a.runner]; ok {
			tenant, pl = rr.tenant, rr.placement
		}
	}
	return store.Admission{ID: admissionWire(a.id), Reservation: reservationWire(a.Reservation), Node: d.ids.nodeName(a.Node),
		Relay: a.owner, Runner: a.runner, Tenant: tenant, Placement: placementKey(pl), Job: job, ClaimedAt: a.ClaimedAt}
}

// Claim implements api.Backend (API-26, DECISIONS 1). A claimed admission
// is persisted with its reservation and node (ARB-04, DECISIONS 6).
func (d *Driver) Claim(ctx context.Context, p api.Principal, id string) error {
	r := &claimReq{principal: p.ID, id: id}
	if err := d.call(ctx, r); err != nil || r.durable == nil {
		return err
	}
	// DECISIONS 6: answer only once the claim survives a restart.
	if e := <-r.durable; e != nil {
		return &api.Error{Code: client.CodeInternal, Msg: "persisting the claim failed", Err: e}
	}
	return nil
}

// claimReq claims a grant: durable reports the claim's record write, nil
// when none was needed (a repeated claim).
type claimReq struct {
	reply
	principal, id string
	durable       <-chan error
}

func (r *claimReq) run(d *Driver) {
	aid, a, known, err := d.admFor(r.principal, r.id)
	if r.err = err; err != nil {
		return
	}
	if aid == 0 {
		r.err = api.Errorf(client.CodeReservationGone, "no such grant")
		return
	}
	if r.err = verdictError(d.stepExec(sched.Claimed{Admission: aid})); r.err != nil || !known || a.State != "granted" {
		return // a repeated claim: its record is written already
	}
	if a, known = d.admission(aid); !known {
		return
	}
	rec := d.admissionRecord(a, "")
	r.durable = d.w.doKey("adm:"+rec.ID, func(ctx context.Context) error { return d.st.PutAdmission(ctx, rec) })
}

// Outcome implements api.Backend (API-27, API-28, ARB-33, ARB-34).
func (d *Driver) Outcome(ctx context.Context, p api.Principal, admission string, o client.Outcome) error {
	aid, ok := parseAdmission(admission)
	if !ok {
		return api.Errorf(client.CodeInvalid, "malformed admission ID %q", admission)
	}
	return d.call(ctx, &outcomeReq{principal: p.ID, aid: aid, o: o})
}

type outcomeReq struct {
	reply
	principal string
	aid       sched.AdmissionID
	o         client.Outcome
}

func (r *outcomeReq) run(d *Driver) {
	if a, ok := d.admission(r.aid); ok && a.owner != r.principal {
		r.err = notFound("admission")
		return
	}
	r.err = verdictError(d.stepExec(sched.Outcome{Admission: r.aid, Kind: outcomeToSched(r.o)}))
}

// Renew implements api.Backend (API-29): the node's answer to the renew
// gives the lease returned.
func (d *Driver) Renew(ctx context.Context, p api.Principal, id string, leaseSecs int) (client.ReservationGrant, error) {
	r := &renewReq{principal: p.ID, id: id, lease: make(chan renewAnswer, 1)}
	if err := d.call(ctx, r); err != nil {
		return client.ReservationGrant{}, err
	}
	t := d.clk.NewTimer(renewTimeout)
	defer t.Stop()
	select {
	case ans := <-r.lease:
		if ans.gone {
			return client.ReservationGrant{}, api.Errorf(client.CodeReservationGone, "reservation gone")
		}
		r.g.LeaseSecs = ans.remaining
		return r.g, nil
	case <-t.C():
		return client.ReservationGrant{}, &api.Error{Code: client.CodeUnavailable, Msg: "the node did not answer the renew in time", RetryAfter: 1}
	case <-ctx.Done():
		return client.ReservationGrant{}, ctx.Err()
	}
}

// renewReq asks the node to renew a reservation: g is the grant renewed,
// and the node's lease answer comes on lease.
type renewReq struct {
	reply
	principal, id string
	lease         chan renewAnswer
	g             client.ReservationGrant
}

func (r *renewReq) run(d *Driver) {
	aid, a, known, err := d.admFor(r.principal, r.id)
	if r.err = err; err != nil {
		return
	}
	if aid == 0 || !known {
		r.err = api.Errorf(client.CodeReservationGone, "no such reservation")
		return
	}
	acts := d.step(sched.RenewRequested{Admission: aid})
	if r.err = verdictError(verdictOf(acts)); r.err == nil {
		d.renewers[a.Reservation] = append(d.renewers[a.Reservation], r.lease)
		r.g = client.ReservationGrant{Admission: admissionWire(aid), Reservation: reservationWire(a.Reservation),
			Node: d.ids.nodeName(a.Node), Envelope: envelopeFromSched(a.Envelope)}
	}
	d.exec(acts)
}

// Release implements api.Backend (API-30): 204 even when already gone.
func (d *Driver) Release(ctx context.Context, p api.Principal, id string) error {
	return d.call(ctx, &releaseReq{principal: p.ID, id: id})
}

type releaseReq struct {
	reply
	principal, id string
}

func (r *releaseReq) run(d *Driver) {
	aid, _, _, err := d.admFor(r.principal, r.id)
	if r.err = err; err == nil && aid != 0 {
		d.stepExec(sched.Released{Admission: aid})
	}
}
