package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/sched"
)

// NodeSender sends frames to a node's session; *session.NodeSession
// implements it. Send must not block.
type NodeSender interface {
	Send(m dispatch.Message) error
}

// ErrNodeProtocol is returned by [Driver.NodeFrame] for a frame that breaks
// the node protocol (an output chunk leaving a gap, NODE-12); the session
// should end.
var ErrNodeProtocol = errors.New("hub: node protocol error")

// ErrNodeResync is returned by [Driver.NodeFrame] for an output chunk the
// hub could not store (the output store failed): it was not acked, and
// the node resends output only from the hub's ack on a new session, so
// the session should end. The node's next session sends held, which the
// hub answers with the stored offset, and the node resends from there.
var ErrNodeResync = errors.New("hub: node output not stored; the node must resend")

// NodeConnected records that node's session is up and sends through s.
// On a new session (resumed false) the node sends its report then held;
// the core learns of the node only with both, as one NodeReport carrying
// Held, so nothing is offered between the two that held would then deny
// (NSESS-11, NSESS-24). A resumed session continues where it was: the
// node is reachable again with its last report. (The session layer's
// NodeUp maps here.)
func (d *Driver) NodeConnected(ctx context.Context, node string, s NodeSender, resumed bool) error {
	return d.ask(ctx, nodeUp{node, s, resumed})
}

func (e nodeUp) run(d *Driver) {
	if d.removed[e.node] {
		return
	}
	n := d.nodeRecord(e.node)
	if n.send == nil {
		d.met.add("vk_hub_nodes_connected", 1)
	}
	n.send, n.downAt, n.lostSent = e.send, time.Time{}, false
	delete(d.down, e.node)
	if _, ok := d.nodeSets[e.node]; ok {
		d.sendSettings(n)
	}
	if !e.resumed {
		n.synced = false
	} else if n.report != nil && n.synced {
		d.exec(d.step(d.nodeEvent(n)))
	}
	d.log.Info("node connected", logkey.NodeID, e.node, "resumed", e.resumed)
}

// NodeDisconnected records that node's session is gone: the core stops
// offering to it at once (unreachable); past job_lost_after it is lost
// and its jobs end lost (FAIL-16).
//
// It has [Driver.RelayDisconnected]'s shape but not its meaning, so the
// two stay apart: a node's absence is a state with a deadline (down,
// downAt; its jobs run on until then), a relay's ends its tickets at once.
func (d *Driver) NodeDisconnected(ctx context.Context, node string) error {
	return d.ask(ctx, nodeDown{node})
}

func (e nodeDown) run(d *Driver) {
	n := d.nodes[e.node]
	if n == nil || n.send == nil {
		return
	}
	n.send, n.downAt = nil, d.now()
	d.down[e.node] = n
	d.met.add("vk_hub_nodes_connected", -1)
	d.exec(d.step(sched.NodeUnreachable{Node: n.id}))
	d.log.Info("node disconnected", logkey.NodeID, e.node)
}

func (d *Driver) nodeRecord(node string) *nodeRec {
	n := d.nodes[node]
	if n == nil {
		n = &nodeRec{name: node, id: d.ids.node(node), state: dispatch.NodeReady}
		d.nodes[node] = n
		// An operator's ceiling survives a restart: the core learns it
		// with the node's first record (OPS-02).
		if set := d.nodeSets[node]; set.Ceiling > 0 || set.Zero {
			d.exec(d.step(set.ceilingEvent(n.id)))
		}
	}
	return n
}

// NodeFrame handles one state-changing frame from node (a dispatch
// message, pointer or value). Output chunks are written (and synced) on
// the caller's goroutine before the ack is sent (NODE-12); everything else
// runs on the driver's. It returns an error wrapping [ErrNodeProtocol]
// when the session should end.
func (d *Driver) NodeFrame(ctx context.Context, node string, m dispatch.Message) error {
	if o, ok := frameAs[dispatch.Output](m); ok {
		return d.nodeOutput(ctx, node, o)
	}
	return d.ask(ctx, nodeMsg{node, m})
}

// nodeFrames handles the node frames that change the driver's state, one
// entry per frame type (see [onFrame]); [Driver.nodeMessage] tries them in
// turn.
var nodeFrames = []func(*Driver, *nodeRec, any) bool{
	onFrame((*Driver).nodeReport),
	onFrame((*Driver).nodeHeld),
	onFrame((*Driver).nodeHeartbeat),
	onFrame((*Driver).nodeOfferReply),
	onFrame((*Driver).nodeLease),
	onFrame((*Driver).nodeJob),
	onFrame((*Driver).nodeResult),
}

func (e nodeMsg) run(d *Driver) {
	if d.removed[e.node] {
		return // its session is ending
	}
	n := d.nodeRecord(e.node)
	n.lastSeen = d.now()
	for _, handle := range nodeFrames {
		if handle(d, n, e.msg) {
			return
		}
	}
	d.log.Debug("node frame ignored", logkey.NodeID, e.node, "type", string(e.msg.FrameType()), "kind", string(e.msg.FrameKind()))
}

func (d *Driver) nodeReport(n *nodeRec, r dispatch.Report) {
	n.report = &r
	if n.synced { // a change of a node already reconciled
		d.exec(d.step(d.nodeEvent(n)))
	}
}

// nodeHeld reconciles the node's held list (NSESS-24): the core releases
// reservations it does not know, cancels jobs it gave up on and adopts
// restored admissions (DECISIONS 6); the driver acks each followed job's
// output at its stored offset and cancels jobs it never heard of.
func (d *Driver) nodeHeld(n *nodeRec, h dispatch.Held) {
	if n.report == nil {
		d.log.Warn("held before report; ignored", logkey.NodeID, n.name)
		return
	}
	d.adoptUndecided(n, h)
	defer d.heldCame(n.name)
	held, unknown := heldToSched(h, func(id string) (sched.JobID, bool) {
		j := d.job(id)
		if j == nil {
			return 0, false
		}
		return j.sid, true
	})
	ev := d.nodeEvent(n)
	ev.Held = held
	n.synced = true
	d.exec(d.step(ev))
	for _, hj := range h.Jobs {
		if j := d.job(hj.Job); j != nil && j.rec.Node == n.name {
			if j.rec.State == store.JobStarting {
				// FAIL-15: the start's answer was lost; held says the node
				// took it.
				j.rec.State, j.spec = store.JobRunning, nil
				d.saveJob(j, true)
			}
			d.sendTo(n, dispatch.OutputAck{Job: hj.Job, Offset: j.outLen})
			if j.rec.State == store.JobFinished {
				d.recordedOnceDurable(n, j)
			}
		}
	}
	for _, id := range unknown {
		d.sendTo(n, cancelFrame(id, client.CancelImmediate)) // FAIL-17
	}
}

// sendTo sends m to n's session; a frame to a node not connected is
// dropped.
func (d *Driver) sendTo(n *nodeRec, m dispatch.Message) {
	if n.send == nil {
		d.log.Debug("node not connected; frame dropped", logkey.NodeID, n.name, "kind", string(m.FrameKind()))
		return
	}
	if err := n.send.Send(m); err != nil {
		d.log.Warn("send to node failed", logkey.NodeID, n.name, logkey.Err, err)
	}
}

func (d *Driver) nodeHeartbeat(n *nodeRec, h dispatch.Heartbeat) {
	if h.State != "" && h.State != n.state {
		n.state = h.State
		if n.report != nil && n.synced {
			d.exec(d.step(d.nodeEvent(n)))
		}
	}
	hb := sched.NodeHeartbeat{Node: n.id}
	if h.Load1 != nil {
		hb.Load1, hb.HasLoad = *h.Load1, true
	}
	if n.synced {
		d.exec(d.step(hb))
	}
}

func (d *Driver) nodeOfferReply(n *nodeRec, r dispatch.OfferReply) {
	ev, ok := offerReplyToSched(n.id, r)
	if !ok {
		d.log.Warn("offer reply for a malformed reservation", logkey.NodeID, n.name, logkey.Reservation, r.Reservation)
		return
	}
	d.exec(d.step(ev))
}

func (d *Driver) nodeLease(n *nodeRec, l dispatch.Lease) {
	ev, ok := leaseToSched(l)
	if !ok {
		return
	}
	d.exec(d.step(ev))
	rid, _ := parseReservation(l.Reservation)
	ans := renewAnswer{gone: l.State != dispatch.LeaseHeld, remaining: l.RemainingSecs}
	for _, ch := range d.renewers[rid] {
		ch <- ans
	}
	delete(d.renewers, rid)
}

// nodeJob handles a job state report (NSESS-14). Accepted drops the
// spec's secrets from memory (AUTH-07).
func (d *Driver) nodeJob(n *nodeRec, u dispatch.JobUpdate) {
	j := d.job(u.Job)
	if j == nil {
		if u.State == dispatch.JobAccepted || u.State == dispatch.JobRunning {
			d.sendTo(n, cancelFrame(u.Job, client.CancelImmediate))
		}
		return
	}
	switch u.State {
	case dispatch.JobAccepted:
		d.exec(d.step(sched.JobStartReplied{Node: n.id, Job: j.sid, Accepted: true}))
		if j.rec.State == "starting" && j.rec.Node == n.name {
			d.observeJobWait(j)
			j.rec.State, j.spec = "running", nil
			d.logWhenDurable(d.saveJob(j, true), "job running", logkey.JobID, j.rec.ID, logkey.NodeID, n.name)
			if j.rec.Cancel != "" {
				d.sendTo(n, cancelFrame(j.rec.ID, client.CancelMode(j.rec.Cancel)))
			}
		}
	case dispatch.JobRefused:
		d.exec(d.step(sched.JobStartReplied{Node: n.id, Job: j.sid, Reason: string(u.Reason)}))
		if j.rec.State == "starting" && j.rec.Node == n.name {
			j.rec.State, j.rec.Node = "queued", ""
			d.saveJob(j, true)
		}
	case dispatch.JobRunning:
		if j.rec.State == "starting" {
			d.exec(d.step(sched.JobStartReplied{Node: n.id, Job: j.sid, Accepted: true}))
			d.observeJobWait(j)
			j.rec.State, j.spec = "running", nil
		}
		if u.Stage != j.rec.Stage || j.rec.State != "running" {
			j.rec.Stage = u.Stage
			d.saveJob(j, true)
		}
	case dispatch.JobFinished:
		// The core hears of it with the result, which carries the wall
		// time for its runtime statistics (BS-23); the room is held until
		// then (the node sends it once its output is acked, NODE-13).
	}
}

// nodeResult stores a job's result and answers recorded (NSESS-10, 16).
func (d *Driver) nodeResult(n *nodeRec, r dispatch.Result) {
	j := d.job(r.Job)
	if j == nil {
		d.sendTo(n, dispatch.Recorded{Job: r.Job})
		return
	}
	if j.rec.Node != n.name {
		d.log.Warn("result from a node the job is not on", logkey.JobID, r.Job, logkey.NodeID, n.name)
		return
	}
	fin := sched.JobFinished{Job: j.sid, Name: j.name}
	if u := r.Result.Usage; u != nil {
		fin.Wall = time.Duration(u.WallMS) * time.Millisecond
	}
	d.exec(d.step(fin))
	d.finishJob(j, r.Result) // a repeat keeps the first result
	// NSESS-10: "recorded" only once the result is durable; a failed write
	// sends nothing (a repeat writes it again), and the node repeats its
	// result.
	d.recordedOnceDurable(n, j)
}

// nodeOutput appends a chunk durably, then acks it (NODE-12, NSESS-08).
// Output of a job the hub does not run on that node is dropped (logged);
// output of a finished job is acked at the stored length without
// writing (a resend after a reconnect); only a gap is a protocol error.
// A chunk the store failed to take is not acked and returns
// [ErrNodeResync]: the node would otherwise never send it again.
func (d *Driver) nodeOutput(ctx context.Context, node string, o dispatch.Output) error {
	r := &outputStateReq{node: node, job: o.Job}
	if err := d.ask(ctx, r); err != nil {
		return err
	}
	send, lost := r.send, r.lost
	if !r.known && !r.inMemory {
		lost = d.settledLost(ctx, o.Job, node)
	}
	if lost && send != nil {
		// FAIL-17: the hub gave up on the job (ended lost while the node
		// was out of touch) but the node, back on a resumed session (no
		// held, NSESS-24), still runs it: cancel it.
		d.log.Info("cancelling a job the hub ended lost", logkey.JobID, o.Job, logkey.NodeID, node)
		if err := send.Send(cancelFrame(o.Job, client.CancelImmediate)); err != nil {
			d.log.Warn("cancel not sent", logkey.JobID, o.Job, logkey.Err, err)
		}
	}
	if !r.known {
		d.log.Warn("output for a job not running on the node; dropped", logkey.JobID, o.Job, logkey.NodeID, node)
		return nil
	}
	n := r.stored
	if !r.finished {
		var err error
		n, err = d.out.Append(ctx, o.Job, o.Offset, o.Data)
		if errors.Is(err, output.ErrGap) {
			return fmt.Errorf("%w: %w", ErrNodeProtocol, err)
		}
		if err != nil {
			return fmt.Errorf("%w: output of job %s at %d: %w", ErrNodeResync, o.Job, o.Offset, err)
		}
		d.ask(ctx, outputStored{o.Job, n})
	}
	if send != nil {
		if err := send.Send(dispatch.OutputAck{Job: o.Job, Offset: n}); err != nil {
			d.log.Warn("output ack not sent", logkey.JobID, o.Job, logkey.Err, err)
		}
	}
	return nil
}

// outputStateReq asks what the driver knows of a job whose output a node
// sent: known when it runs on that node (stored is then its durable
// output), inMemory when the driver holds it at all.
type outputStateReq struct {
	node, job                       string
	send                            NodeSender
	known, finished, lost, inMemory bool
	stored                          int64
}

func (r *outputStateReq) run(d *Driver) {
	j := d.job(r.job)
	n := d.nodes[r.node]
	if n != nil {
		r.send = n.send
	}
	r.inMemory = j != nil
	if j != nil && n != nil && j.rec.Node == r.node {
		r.known, r.stored = true, j.outLen
		r.finished = j.rec.State == store.JobFinished
		r.lost = r.finished && j.result != nil && j.result.Failure == client.FailureLost
	}
}

// settledLost reports whether the store's record of a job the driver no
// longer holds (settled) says it ended lost on node.
func (d *Driver) settledLost(ctx context.Context, id, node string) bool {
	if !validJobID(id) {
		return false
	}
	rec, err := d.st.GetJob(ctx, id)
	if err != nil || rec.Node != node || rec.State != store.JobFinished || len(rec.Result) == 0 {
		return false
	}
	var res client.JobResult
	return json.Unmarshal(rec.Result, &res) == nil && res.Failure == client.FailureLost
}

// outputStored records how much of a job's output is durable; output
// growth does not move the revision (API-36).
func (e outputStored) run(d *Driver) {
	if j := d.job(e.job); j != nil && e.len > j.outLen {
		j.outLen = e.len
	}
}
