package hub

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/regtoken"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/proto/job"
	"github.com/vk-ci/vk/sched"
)

// Driver is the one goroutine that owns the scheduling core (STYLE C1):
// client requests and session messages become [sched.Event]s, and the
// [sched.Action]s that come out are carried out — frames to node sessions,
// answers to waiting long polls, job record changes (with revision bumps
// and wakeups), persisted claimed admissions.
//
// Everything the driver owns is touched only on its goroutine, which takes
// typed requests (requests.go: a node or relay came, went or sent a frame;
// a call of the API, admin or UI adapters) and its tick, and carries out
// each with its run method. Disk writes
// of job output happen on the caller's goroutine (the node session's
// reader); record writes (job records, claimed admissions, audit) are
// queued, in order, to a writer goroutine (recWriter), and whoever must
// not answer before one is durable waits for it off the driver's
// goroutine: a claim's 204 (DECISIONS 6), a settle's 204, the node's
// "recorded" (NSESS-10). Only a job's creation (before its 201) and the
// rare ID-floor raise are written on the driver's goroutine.
//
// It is split along its seams, one file each: the API adapter
// (driver_api.go, driver_jobs.go: api.Backend), the session adapter
// (driver_node.go, driver_relay.go: frames of node and relay sessions),
// the admin and UI adapters (admin_backend.go, ui_backend.go) and the
// persistence (driver_store.go); this file is the owner loop and the
// carrying out of the core's actions. The core holds the state of
// tickets, admissions, jobs and every limit; the adapters ask it.
//
// Get it from [Server.Driver]. Its exported methods are the session seam
// (NodeConnected, NodeFrame, NodeDisconnected, RelayConnected, RelayFrame,
// RelayDisconnected — what hub/session's handlers call, and what tests
// call to play a node or a relay), api.Backend and admin.Backend.
//
// Restart (FAIL-19, ARB-04, DECISIONS 6): newDriver reloads unsettled
// job records and claimed admissions from the store. Jobs a node had
// accepted are restored into the core, to be adopted when their node's
// held lists them; jobs not yet accepted end lost (their specs, kept in
// memory only, are gone, AUTH-07), except after a takeover under the
// lease, where they wait for the nodes' held (takeover.go); claimed
// admissions are restored and adopted when their node's held lists
// their reservation.
type Driver struct {
	core   *sched.Core
	clk    clock.Clock
	st     driverStore
	out    output.Store
	log    *slog.Logger
	met    *metrics
	cfg    Config
	policy *PolicyConfig
	epoch  string // ticket ID epoch of this start

	// The owner loop's input: the typed requests of the sessions and the
	// adapters (requests.go).
	in chan envelope
	// waiting counts the requests handing themselves to the loop, not
	// yet taken. The loop does not read it (handle takes what d.in holds);
	// tests do, to know that requests wait before the loop takes them.
	waiting atomic.Int64
	bg      context.Context // for store writes; never cancelled mid-write
	w       *recWriter      // record writes, in order, off the driver goroutine

	// Owned by the loop goroutine. The core holds the state of tickets,
	// admissions and jobs and every limit; the driver keeps only what
	// the wire and the store need beside it, keyed by the core's IDs
	// (mirror_test.go keeps it so).
	ids      *idTable
	relays   map[string]*relayRec
	nodes    map[string]*nodeRec
	tickets  map[sched.TicketID]*ticketRec
	jobs     map[sched.JobID]*jobRec
	jobIDs   map[string]sched.JobID // wire job ID → the core's
	renewers map[sched.ReservationID][]chan renewAnswer
	down     map[string]*nodeRec // nodes whose session is gone, not yet declared lost
	nextTk   uint64
	nextJob  uint64
	sessions uint64 // relay sessions begun, the core's session numbers
	idFloor  uint64
	capRev   uint64
	capWake  chan struct{}
	nodeSets map[string]nodeSettings // operator settings by node (admin socket)
	// removed: nodes an operator removed while this driver ran; frames of
	// their ending sessions are dropped (their keys are refused anyway).
	removed map[string]bool
	trace   tracer // the workload trace (hub/trace.go)
	limbo   limbo  // a takeover's jobs no node is known to have accepted (takeover.go)
	// settling: jobs settled (dropped from jobs) whose settled record is
	// not durable yet, by wire ID; their views are answered from here
	// until it is (see [Driver.settleJob]).
	settling map[string]*settlingJob
	// beforeStart is Options.BeforeStart (tests), called before a start
	// goes out.
	beforeStart func(job string)
	// tokens mints the job registry tokens of starts (regtokens.go); nil
	// mints none.
	tokens *regtoken.Minter
}

// driverStore is what the driver asks of the hub's store: job records and
// claimed admissions, meta values (the seed, the ID floor, operator
// settings), the audit log, approvals, and the enrolled principals its
// admin and UI views list.
type driverStore interface {
	store.Records
	CreateJobAnswered(ctx context.Context, j store.Job, a store.Answer) error
	store.Meta
	store.Audit
	store.Approvals
	GetPrincipal(ctx context.Context, id string) (store.Principal, error)
	ListPrincipals(ctx context.Context) ([]store.Principal, error)
}

// relayRec is a relay as the driver knows it.
type relayRec struct {
	name    string
	id      sched.RelayID
	up      bool
	send    RelaySender
	noWork  bool                 // session below version 2: no new work (RSESS-11)
	report  *client.RelayReport  // the last report; nil before the first
	runners map[string]runnerRec // by name, from the last report
	// states are its runners' states as its last heartbeat said them,
	// for the UI's Relays page.
	states map[string]client.RunnerState
}

type runnerRec struct {
	id        sched.RunnerID
	tenant    string
	placement client.Placement
}

// nodeRec is a node as the driver knows it.
type nodeRec struct {
	name     string
	id       sched.NodeID
	send     NodeSender // nil while disconnected
	report   *dispatch.Report
	state    dispatch.NodeState
	downAt   time.Time // when its session went; zero while connected
	lastSeen time.Time // last frame from the node
	lostSent bool
	// synced: the core has this session's report and held (a new
	// session's report waits for its held).
	synced bool
}

// ticketRec is what the wire needs of a live ticket beside the core's
// view of it: who asked, and the channel its long polls wait on. It lives
// from TicketQueued until the ticket expires, its admission ends or
// becomes a job.
type ticketRec struct {
	id     sched.TicketID
	owner  string
	runner string
	wake   chan struct{} // closed and replaced on every change
	queued time.Time     // when the relay asked (the queue's "since")
}

// jobRec is an unsettled job.
type jobRec struct {
	sid    sched.JobID
	rec    store.Job
	spec   *job.JobSpec // full spec, secrets included; nil once a node accepted it (AUTH-07)
	name   string       // the GitLab job's name, for the core's runtime statistics (BS-23)
	stored *writeDone   // the finished record's write; nil before finishJob
	saved  *writeDone   // the last write of rec; nil when rec came from the store or its creation
	outLen int64
	result *client.JobResult
	wake   chan struct{}
}

type renewAnswer struct {
	remaining int
	gone      bool
}

// newDriver builds the driver over an open store and output store,
// restoring what survived a restart. Run it with [Driver.Run].
func newDriver(ctx context.Context, cfg Config, pol *PolicyConfig, st driverStore, out output.Store, clk clock.Clock, log *slog.Logger, met *metrics) (*Driver, error) {
	log = cmp.Or(log, slog.New(slog.DiscardHandler))
	if met == nil {
		met = newMetrics()
	}
	clk = clock.Or(clk)
	var ep [4]byte
	rand.Read(ep[:])
	d := &Driver{
		clk: clk, st: st, out: out, log: log, met: met, cfg: cfg, policy: pol,
		epoch: hex.EncodeToString(ep[:]), in: make(chan envelope), bg: context.WithoutCancel(ctx),
		ids: newIDTable(), relays: map[string]*relayRec{}, nodes: map[string]*nodeRec{},
		tickets: map[sched.TicketID]*ticketRec{}, jobs: map[sched.JobID]*jobRec{}, jobIDs: map[string]sched.JobID{},
		renewers: map[sched.ReservationID][]chan renewAnswer{}, down: map[string]*nodeRec{}, removed: map[string]bool{}, capWake: make(chan struct{}),
		trace: nopTracer{}, // until openTrace, after the restore
	}
	d.w = newRecWriter(d.bg, st, log)
	d.w.observe = func(phase string, seconds float64) {
		met.observeHist("vk_hub_record_write_seconds", seconds, "phase", phase)
	}
	if err := d.load(ctx); err != nil {
		d.w.close()
		return nil, err
	}
	d.trace = d.openTrace()
	met.collect = func(ctx context.Context) { d.ask(ctx, countJobsReq{}) }
	return d, nil
}

// load reads what the driver keeps in the store (operator settings, the
// scheduler's seed, the ID floor), makes the core and restores the
// unsettled records into it.
func (d *Driver) load(ctx context.Context) error {
	if err := d.loadOperatorSettings(ctx); err != nil {
		return err
	}
	if d.policy != nil {
		d.warnPolicy(ctx, *d.policy)
	}
	var seed [8]byte
	rand.Read(seed[:])
	sb, err := d.st.InitMeta(ctx, store.MetaSchedulerSeed, seed[:])
	if err != nil {
		return fmt.Errorf("hub: scheduler seed: %w", err)
	}
	if len(sb) != 8 {
		sb = seed[:]
	}
	d.core = sched.New(d.schedPolicy(), binary.BigEndian.Uint64(sb))
	if b, err := d.st.GetMeta(ctx, metaIDFloor); err == nil && len(b) == 8 {
		d.idFloor = binary.BigEndian.Uint64(b)
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("hub: id floor: %w", err)
	}
	return d.restore(ctx)
}

// schedPolicy is the core's policy: the capacity policy in force plus the
// hub's outstanding-ticket limits (API-20).
func (d *Driver) schedPolicy() sched.Policy {
	p := policyToSched(d.policy, d.ids)
	p.RelayTicketLimit, p.TicketLimit = d.cfg.Limits.PerPrincipal, d.cfg.Limits.PerHub
	return p
}

// Run runs the driver loop until ctx ends: requests from other
// goroutines, and a tick every cfg.TickMillis. When it returns, every
// record write it queued is durable.
func (d *Driver) Run(ctx context.Context) error {
	t := d.clk.NewTimer(d.cfg.tick())
	defer t.Stop()
	defer d.w.close()
	defer d.trace.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-d.in:
			d.handle(e)
		case <-t.C():
			d.onTick()
			t.Reset(d.cfg.tick())
		}
	}
}

// maxTogether bounds the requests the loop takes at once behind a
// submission ([Driver.handle]).
const maxTogether = 256

// handle carries out e. A submission takes with it every request already
// waiting for the loop (at most maxTogether): the submissions among them
// are carried out together ([Driver.submitTogether]), then the others in
// their order. Their callers were all waiting at once, so none of them
// can have sent its request after hearing another's answer: this order
// is as good as the one they arrived in.
func (d *Driver) handle(e envelope) {
	if _, ok := e.req.(*submitReq); !ok {
		e.req.run(d)
		close(e.done)
		return
	}
	subs, rest := []envelope{e}, []envelope(nil)
	for len(subs)+len(rest) < maxTogether {
		var next envelope
		select {
		case next = <-d.in:
		default:
		}
		if next.req == nil {
			break
		}
		if _, ok := next.req.(*submitReq); ok {
			subs = append(subs, next)
		} else {
			rest = append(rest, next)
		}
	}
	rs := make([]*submitReq, len(subs))
	for i, e := range subs {
		rs[i] = e.req.(*submitReq)
	}
	d.submitTogether(rs)
	for _, e := range subs {
		close(e.done)
	}
	for _, e := range rest {
		e.req.run(d)
		close(e.done)
	}
}

// submitTogether carries out submissions that arrived together: each is
// staged in order (checked and stepped into the core), then the records
// of the jobs they made are written at once, from one goroutine each, so
// that a store that gathers writes commits them in one transaction and
// one fsync (boltstore's Gather), and then each is finished in order
// (the 201, the start frame). The loop waits for the writes, as it waits
// for a lone submission's: nothing else it does can see a job whose
// record is not durable.
func (d *Driver) submitTogether(subs []*submitReq) {
	var writes []*submitReq
	for _, r := range subs {
		r.stage(d)
		if r.writes() {
			writes = append(writes, r)
		}
	}
	writeTogether(d.bg, d.st, true, len(writes), func(ctx context.Context, i int) {
		r := writes[i]
		r.created = d.st.CreateJobAnswered(ctx, r.made.j.rec, r.made.ans)
	})
	d.met.observeHist("vk_hub_submissions_together", float64(len(subs)))
	for _, r := range subs {
		r.finish(d)
	}
}

// errStopped is returned when the driver loop is gone.
var errStopped = errors.New("hub: driver stopped")

// now is the driver's clock reading.
func (d *Driver) now() time.Time { return d.clk.Now() }

// step feeds one event to the core and returns a copy of the actions.
func (d *Driver) step(ev sched.Event) []sched.Action {
	start := time.Now()
	acts := d.core.Step(d.now(), ev)
	d.met.observeHist("vk_hub_decision_seconds", time.Since(start).Seconds())
	d.trace.Step(d.now(), ev, acts)
	if _, isTick := ev.(sched.Tick); !isTick || len(acts) > 0 {
		d.bumpCapacity()
	}
	return append([]sched.Action(nil), acts...)
}

// stepExec steps and carries out every action but the verdict, which it
// returns (VerdictOK when the event has none).
func (d *Driver) stepExec(ev sched.Event) sched.Verdict {
	acts := d.step(ev)
	d.exec(acts)
	return verdictOf(acts)
}

func verdictOf(acts []sched.Action) sched.Verdict {
	if len(acts) > 0 {
		if v, ok := acts[0].(sched.Verdict); ok {
			return v
		}
	}
	return sched.Verdict{Code: sched.VerdictOK}
}

func (d *Driver) bumpCapacity() {
	d.capRev++
	close(d.capWake)
	d.capWake = make(chan struct{})
}

// exec carries out actions (verdicts are the caller's).
func (d *Driver) exec(acts []sched.Action) {
	for _, a := range acts {
		d.log.Debug("sched action", "action", a.String())
		switch a := a.(type) {
		case sched.Verdict:
		case sched.Offer:
			d.raiseFloor(uint64(a.Reservation))
			d.sendNode(a.Node, offerFromSched(a))
		case sched.Grant:
			d.onGrant(a)
		case sched.Release:
			d.sendNode(a.Node, releaseFromSched(a))
		case sched.Renew:
			d.sendNode(a.Node, renewFromSched(a))
		case sched.Start:
			d.onStart(a)
		case sched.Expire:
			d.onExpire(a)
		case sched.EndJob:
			if j := d.jobs[a.Job]; j != nil {
				d.finishJob(j, client.JobResult{Failure: client.Failure(a.Failure), Message: a.Message, OutputLen: j.outLen})
			}
		case sched.CancelJob:
			if j := d.jobs[a.Job]; j != nil {
				d.sendNode(a.Node, cancelFrame(j.rec.ID, client.CancelImmediate))
			}
		case sched.AdmissionEnded:
			d.onAdmissionEnded(a)
		}
	}
}

func (d *Driver) sendNode(id sched.NodeID, m dispatch.Message) {
	name := d.ids.nodeName(id)
	if n := d.nodes[name]; n != nil {
		d.sendTo(n, m)
	} else {
		d.log.Debug("node unknown; frame dropped", logkey.NodeID, name, "kind", string(m.FrameKind()))
	}
}

func (d *Driver) onGrant(g sched.Grant) {
	d.met.add("vk_hub_grants_total", 1)
	if t := d.tickets[g.Ticket]; t != nil {
		// The wait by size class counts the runner's placement, as the
		// queue shows it.
		if r := d.relays[t.owner]; r != nil {
			if rr, ok := r.runners[t.runner]; ok {
				d.observeWait(waitTicket, rr.placement, t.queued)
			}
		}
		d.wakeTicket(t)
	}
}

func (d *Driver) wakeTicket(t *ticketRec) {
	close(t.wake)
	t.wake = make(chan struct{})
}

func (d *Driver) onExpire(e sched.Expire) {
	t := d.tickets[e.Ticket]
	if t == nil {
		return
	}
	d.met.add("vk_hub_tickets_ended_total", 1)
	d.dropTicket(e.Ticket)
	d.renewersGone()
}

// dropTicket forgets a ticket and wakes its pollers (who then read 410).
func (d *Driver) dropTicket(id sched.TicketID) {
	if t := d.tickets[id]; t != nil {
		delete(d.tickets, id)
		d.wakeTicket(t)
	}
}

// renewersGone answers "gone" to the renews waiting on reservations no
// admission of the core holds any more.
func (d *Driver) renewersGone() {
	for rid, chs := range d.renewers {
		if _, ok := d.core.ReservationAdmission(rid); ok {
			continue
		}
		for _, ch := range chs {
			ch <- renewAnswer{gone: true}
		}
		delete(d.renewers, rid)
	}
}

// onAdmissionEnded forgets an ended admission's ticket and its persisted
// record: an admission ends only once claimed (granted ones end with
// their ticket's Expire).
func (d *Driver) onAdmissionEnded(e sched.AdmissionEnded) {
	d.log.Debug("admission ended", logkey.Admission, admissionWire(e.Admission), "reason", e.Reason)
	d.dropTicket(e.Ticket)
	d.renewersGone()
	wire := admissionWire(e.Admission)
	d.w.doKey("adm:"+wire, func(ctx context.Context) error { return d.st.DeleteAdmission(ctx, wire) })
}

// onStart sends a start with the job's full spec (secrets included: the
// node needs them).
func (d *Driver) onStart(s sched.Start) {
	j := d.jobs[s.Job]
	if j == nil {
		return
	}
	j.rec.State, j.rec.Node = store.JobStarting, d.ids.nodeName(s.Node)
	d.saveJob(j, true)
	d.sendStart(j, s)
}

// sendStart sends j's start frame, its record starting already.
func (d *Driver) sendStart(j *jobRec, s sched.Start) {
	if j.spec == nil {
		d.log.Error("start without a spec in memory", logkey.JobID, j.rec.ID)
		return
	}
	if d.beforeStart != nil {
		d.beforeStart(j.rec.ID)
	}
	st := startFromSched(s, j.rec.ID, *j.spec)
	st.Cache = d.jobCache(s.Node, j)
	d.sendNode(s.Node, st)
}

// onTick lets time pass in the core and declares nodes lost whose session
// is gone past job_lost_after (FAIL-16).
func (d *Driver) onTick() {
	d.exec(d.step(sched.Tick{}))
	now := d.now()
	d.limboTick(now)
	d.pruneSettling()
	for _, name := range sortedKeys(d.down) {
		n := d.down[name]
		if n.send == nil && !n.downAt.IsZero() && !n.lostSent && now.Sub(n.downAt) >= d.cfg.lostAfter() {
			n.lostSent = true
			delete(d.down, name)
			d.log.Warn("node lost", logkey.NodeID, name, "down_since", n.downAt)
			d.exec(d.step(sched.NodeLost{Node: n.id}))
		}
	}
}
