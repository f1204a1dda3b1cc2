package hub

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/sched"
)

// The driver's persistence: job records, claimed admissions and audit
// entries go to the store in order through the record writer (recWriter),
// and restore reads them back at start. Only a job's creation (before its
// 201) and the rare ID-floor raise are written on the driver's goroutine.

// writeDone is one record write's end: err is set before done is closed
// and read only after.
type writeDone struct {
	done chan struct{}
	err  error
}

// Meta keys of the driver.
const (
	metaIDFloor = "hub.id_floor"
	idFloorStep = 1 << 16
)

// raiseFloor persists a floor above the IDs the core mints, so a restarted
// hub never reuses a reservation ID a node may still hold.
func (d *Driver) raiseFloor(id uint64) {
	if id < d.idFloor {
		return
	}
	d.idFloor = id + idFloorStep
	b := binary.BigEndian.AppendUint64(nil, d.idFloor)
	if err := d.st.PutMeta(d.bg, metaIDFloor, b); err != nil {
		d.log.Error("persisting the ID floor failed", logkey.Err, err)
	}
}

// saveJob queues a write of the job record (see recWriter) and, when
// bump, moves its revision and wakes its long polls (API-36). The
// returned channel says when the write is durable. The write is also
// kept as j.saved, the write of the record's current revision: its view
// is answered only once that write is durable ([Driver.durableView]).
func (d *Driver) saveJob(j *jobRec, bump bool) <-chan error {
	if bump {
		j.rec.Revision++
	}
	j.rec.Updated = d.now()
	j.rec.OutputLen = j.outLen
	ch := d.w.saveJob(j.rec.Clone())
	if bump {
		close(j.wake)
		j.wake = make(chan struct{})
	}
	wd, fwd := &writeDone{done: make(chan struct{})}, make(chan error, 1)
	j.saved = wd
	go func() {
		wd.err = <-ch
		close(wd.done)
		fwd <- wd.err
	}()
	return fwd
}

// logWhenDurable logs msg at info once the write saved reports durable
// (nothing if it failed: the write's own error is logged where it is
// made). "job running" is logged this way: from that moment the job's
// view shows it running, and its relay may commit it in GitLab.
func (d *Driver) logWhenDurable(saved <-chan error, msg string, args ...any) {
	log := d.log
	go func() {
		if err := <-saved; err == nil {
			log.Info(msg, args...)
		}
	}()
}

// finishJob records a job's result (once) and marks its output complete;
// j.stored is closed once the record is durable.
func (d *Driver) finishJob(j *jobRec, res client.JobResult) {
	if j.rec.State == store.JobFinished {
		return
	}
	res.OutputLen = max(res.OutputLen, j.outLen)
	b, err := json.Marshal(res)
	if err != nil {
		d.log.Error("encoding a job result failed", logkey.JobID, j.rec.ID, logkey.Err, err)
	}
	j.rec.State, j.rec.Result, j.result, j.spec = store.JobFinished, b, &res, nil
	d.met.add("vk_hub_jobs_finished_total", 1, "failure", res.Failure.MetricLabel())
	d.log.Info("job finished", logkey.JobID, j.rec.ID, "failure", string(res.Failure), "message", res.Message)
	d.storeFinished(j, true)
}

// storeFinished marks a finished job's output complete and saves its
// record, and sets j.stored, done once both are durable (its error is
// either's). Called again after a failed write (the database restarting
// under it), it writes both again: neither may be lost, or the job's
// readers wait for the rest of its output for ever.
func (d *Driver) storeFinished(j *jobRec, bump bool) {
	id := j.rec.ID
	complete := d.w.doKey("out:"+id, func(ctx context.Context) error { return d.out.MarkComplete(ctx, id) })
	durable, wd := d.saveJob(j, bump), &writeDone{done: make(chan struct{})}
	j.stored = wd
	go func() {
		wd.err = errors.Join(<-complete, <-durable)
		close(wd.done)
	}()
}

// recordedOnceDurable answers the node recorded for finished job j once
// its finished record is durable (NSESS-10): at once for a record
// restored from the store, after writing it again when the last write
// failed, never for a write that fails (the node repeats its result). A
// write still in flight when the node asks (its held came while the
// database was restarting) that then fails is written once more
// (recordedRetry), or the node, told nothing, would not repeat its
// result until its next session.
func (d *Driver) recordedOnceDurable(n *nodeRec, j *jobRec) {
	d.recordedWhenDurable(n, j, true)
}

func (d *Driver) recordedWhenDurable(n *nodeRec, j *jobRec, retry bool) {
	st := j.stored
	if st == nil {
		d.sendTo(n, dispatch.Recorded{Job: j.rec.ID})
		return
	}
	inFlight := false
	select {
	case <-st.done:
		if st.err != nil {
			d.storeFinished(j, false)
		}
	default:
		inFlight = true
	}
	send, job, node, stored := n.send, j.rec.ID, n.name, j.stored
	if send == nil {
		return
	}
	go func() {
		<-stored.done
		if stored.err != nil {
			if inFlight && retry {
				ctx, cancel := context.WithTimeout(d.bg, 10*time.Second)
				defer cancel()
				_ = d.ask(ctx, &recordedRetry{node: node, job: job})
			}
			return
		}
		if err := send.Send(dispatch.Recorded{Job: job}); err != nil {
			d.log.Warn("recorded not sent", logkey.JobID, job, logkey.Err, err)
		}
	}()
}

// recordedRetry writes a finished job's result again after the write
// that was in flight when its node asked failed, and answers recorded
// once it is durable (no further retry: the node repeats its result on
// its next session).
type recordedRetry struct{ node, job string }

func (r *recordedRetry) run(d *Driver) {
	n, j := d.nodes[r.node], d.job(r.job)
	if n == nil || n.send == nil || j == nil || j.rec.State != store.JobFinished || j.rec.Node != r.node {
		return
	}
	d.recordedWhenDurable(n, j, false)
}

// audit appends an audit log entry. Entries name IDs and redacted facts
// only, never a spec's secrets (AUTH-07).
func (d *Driver) audit(actor, action, subject, detail string) {
	e := store.AuditEntry{Time: d.now(), Actor: actor, Action: action, Subject: subject, Detail: detail}
	d.w.appendAudit(e)
}

// newJobID returns a random 16-hex-digit job ID.
func newJobID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// restore reloads claimed admissions and unsettled jobs (FAIL-19,
// DECISIONS 6) and feeds them to the core as one Restore event.
func (d *Driver) restore(ctx context.Context) error {
	now := d.now()
	ev := sched.Restore{NextID: d.idFloor}
	adms, err := d.st.ListAdmissions(ctx)
	if err != nil {
		return fmt.Errorf("hub: restore admissions: %w", err)
	}
	jobs, err := d.st.ListJobs(ctx, true)
	if err != nil {
		return fmt.Errorf("hub: restore jobs: %w", err)
	}
	d.sweepOutput(ctx, jobs)
	byAdm := map[string]store.Admission{}
	touch := func(node string) {
		if node == "" {
			return
		}
		if d.nodes[node] == nil {
			d.nodes[node] = &nodeRec{name: node, id: d.ids.node(node), downAt: now}
			d.down[node] = d.nodes[node]
		}
	}
	for _, a := range adms {
		byAdm[a.ID] = a
		if a.Job != "" {
			continue // its job decides (below)
		}
		aid, ok := parseAdmission(a.ID)
		if !ok {
			continue
		}
		pl, _ := parsePlacementKey(a.Placement)
		rid, _ := parseReservation(a.Reservation)
		rel := d.ids.relay(a.Relay)
		run, _ := d.ids.runner(a.Relay, a.Runner)
		touch(a.Node)
		ev.Admissions = append(ev.Admissions, sched.RestoredAdmission{Admission: aid, Reservation: rid,
			Node: d.ids.node(a.Node), Runner: run, Tenant: d.ids.tenant(a.Tenant), Relay: rel, Placement: placementToSched(pl)})
	}
	for _, r := range jobs {
		if rj, ok := d.restoreJob(ctx, r, byAdm); ok {
			touch(r.Node)
			ev.Jobs = append(ev.Jobs, rj)
		}
	}
	d.exec(d.step(ev))
	d.log.Info("hub state restored", "admissions", len(ev.Admissions), "running_jobs", len(ev.Jobs), "jobs", len(jobs))
	return nil
}

// outputSweeper is an output store that can remove, at start, the
// outputs no unsettled job owns (output.Log).
type outputSweeper interface {
	Sweep(ctx context.Context, keep func(job string) bool) ([]string, error)
}

// sweepOutput removes the outputs of settled and unknown jobs, which a
// crash just after a settle can bring back (the settle's drop mark is
// not synced: the settled record is what counts), keeping those of the
// unsettled jobs, live, as restored. A failure is logged: the leftovers
// only take disk space.
func (d *Driver) sweepOutput(ctx context.Context, unsettled []store.Job) {
	sw, ok := d.out.(outputSweeper)
	if !ok {
		return
	}
	live := make(map[string]bool, len(unsettled))
	for _, r := range unsettled {
		live[r.ID] = true
	}
	removed, err := sw.Sweep(ctx, func(job string) bool { return live[job] })
	if err != nil {
		d.log.Warn("output of settled jobs not all removed", logkey.Err, err)
	}
	if len(removed) > 0 {
		d.log.Info("output of settled or unknown jobs removed at start", "jobs", len(removed))
	}
}

// restoreJob reloads one unsettled job record; ok when a node had
// accepted it (rj is then its core's view). A job no node had accepted
// ends lost after a restart (FAIL-19: its spec, with secrets, was in
// memory only); after a takeover under the lease it waits, undecided,
// for the nodes' held instead (see [limbo]).
func (d *Driver) restoreJob(ctx context.Context, r store.Job, byAdm map[string]store.Admission) (rj sched.RestoredJob, ok bool) {
	n, complete, err := d.out.Len(ctx, r.ID)
	if err != nil {
		d.log.Warn("output length unknown", logkey.JobID, r.ID, logkey.Err, err)
	}
	d.nextJob++
	j := &jobRec{sid: sched.JobID(d.nextJob), rec: r, outLen: n, wake: make(chan struct{}), name: specName(r.Spec)}
	j.rec.Revision = d.epochRevision(r.Revision)
	if (r.State == store.JobQueued || r.State == store.JobStarting) && d.cfg.Store.Lease {
		d.undecided(j)
		return rj, false
	}
	d.addJob(j)
	if j.rec.Revision != r.Revision {
		// The lifted revision is stored at once: a view read from the
		// store (a settled job's) must not show the older one.
		d.saveJob(j, false)
	}
	switch r.State {
	case store.JobFinished:
		var res client.JobResult
		if json.Unmarshal(r.Result, &res) == nil {
			j.result = &res
		}
		if !complete && err == nil {
			// The old leader stored the result but died before the
			// output's completeness (a separate write): without it the
			// job's readers wait for more output for ever.
			id := r.ID
			d.w.doKey("out:"+id, func(ctx context.Context) error { return d.out.MarkComplete(ctx, id) })
		}
	case store.JobRunning:
		return d.restoredJob(j), true
	default:
		d.finishJob(j, client.JobResult{Failure: client.FailureLost, Message: sched.MsgNotAcceptedAfter, OutputLen: n})
		d.audit("hub", "job.lost", r.ID, sched.MsgNotAcceptedAfter)
		if a, ok := byAdm[r.Admission]; ok {
			d.st.DeleteAdmission(ctx, a.ID)
		}
	}
	return rj, false
}

// addJob and dropJob keep a job and its wire ID's index.
func (d *Driver) addJob(j *jobRec) {
	d.jobs[j.sid] = j
	d.jobIDs[j.rec.ID] = j.sid
}

func (d *Driver) dropJob(j *jobRec) {
	delete(d.jobs, j.sid)
	delete(d.jobIDs, j.rec.ID)
}

// jobWire is the wire ID of the core's job id ("" if the driver holds
// none).
func (d *Driver) jobWire(id sched.JobID) string {
	if j := d.jobs[id]; j != nil {
		return j.rec.ID
	}
	return ""
}

// job returns the unsettled job with wire ID id, nil if none.
func (d *Driver) job(id string) *jobRec {
	sid, ok := d.jobIDs[id]
	if !ok {
		return nil
	}
	return d.jobs[sid]
}
