package hub

import (
	"context"
	"errors"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/sched"
)

// A takeover's undecided jobs (DECISIONS 16, docs/ha.md).
//
// A hub restart ends a job no node had accepted yet `lost`: its spec,
// secrets included, was in the old process's memory only. After a
// failover that is not acceptable, and it is not even known to be true:
// the old leader may have sent the start, and the node may have taken
// it, without the record saying so (the start goes out at once, the
// record's write is queued). So a new leader under the lease restores
// such a job (queued or starting) as undecided: not in the core, its
// view read from the store as it was. Every node session up at the
// takeover then sends its held (the router hands them over, and the new
// epoch makes each node resync): a job a held lists is adopted as
// running on that node, as a restored running job is. The node a
// starting job's record names is awaited too, even when its session was
// not up at the takeover (it may have taken the old leader's start
// meanwhile; its held comes once it connects). Once every one of those
// helds came (or job_lost_after passed, after which a node that never
// sent one is lost anyway), the jobs still undecided are
// forgotten: their record and claimed admission are deleted. Their relay,
// which keeps GitLab's job response until a node accepted the job, reads
// 404 for the job and submits it again, under the same GitLab job, as a
// new hub job; no node runs the old one, so it runs once.
type limbo struct {
	jobs     map[string]*jobRec // undecided jobs by wire ID
	awaiting map[string]bool    // nodes whose held has not come: sessions up at the takeover, and starting jobs' nodes
	heard    bool               // the takeover's session list came
	deadline time.Time          // forget the rest then, whatever is awaited
}

// epochShift places a leader's epoch in the high bits of the job
// revisions it serves (see [Driver.epochRevision]).
const epochShift = 32

// epochRevision lifts a job revision restored from the store into this
// leader's epoch: epoch<<32 plus the stored count. A leader answers a
// job's view as soon as it changes, before the record's write is
// durable, so the store can hold an older revision than one a client
// saw; a new leader restoring it as it was would serve a revision
// going back, and then the same revision for another state (the HA
// soak's history check found both). Revisions a leader serves are below
// the next epoch's, so they only grow across a failover, and one
// revision is one state. Without a lease (epoch 0) revisions are as
// stored. Epochs stay below 2^21, so revisions stay exact in a JSON
// number read as a float (2^53).
func (d *Driver) epochRevision(rev uint64) uint64 {
	st, ok := d.st.(interface{ Epoch() uint64 })
	if !ok || st.Epoch() == 0 {
		return rev
	}
	return st.Epoch()<<epochShift | rev&(1<<epochShift-1)
}

// takeoverNodes is the list of node sessions up when this driver took
// over, sent by the node router before it hands them over.
type takeoverNodes struct{ nodes []string }

// TookOver tells the driver which node sessions were up at the takeover:
// undecided jobs wait for each one's held (see [limbo]). The node router
// calls it before it hands the sessions over.
func (d *Driver) TookOver(ctx context.Context, nodes []string) error {
	return d.ask(ctx, takeoverNodes{nodes})
}

// undecided keeps a job a node may or may not have accepted at the
// takeover (see [limbo]).
func (d *Driver) undecided(j *jobRec) {
	if d.limbo.jobs == nil {
		d.limbo.jobs = map[string]*jobRec{}
		d.limbo.deadline = d.now().Add(d.cfg.lostAfter())
	}
	d.limbo.jobs[j.rec.ID] = j
	d.log.Info("job undecided at the takeover: waiting for the nodes' held", logkey.JobID, j.rec.ID, "state", string(j.rec.State))
}

func (e takeoverNodes) run(d *Driver) {
	d.limbo.heard = true
	d.limbo.awaiting = map[string]bool{}
	await := func(n string) {
		if rec := d.nodes[n]; rec == nil || !rec.synced {
			d.limbo.awaiting[n] = true
		}
	}
	for _, n := range e.nodes {
		await(n)
	}
	// The node a starting job was sent to may have taken the start while
	// its session to this instance was down: wait for its held too, or the
	// job would be forgotten and resubmitted while that node runs it.
	for _, j := range d.limbo.jobs {
		if j.rec.State == store.JobStarting && j.rec.Node != "" {
			await(j.rec.Node)
		}
	}
	d.settleLimbo(false)
}

// adoptUndecided adopts every undecided job n's held lists as running
// on n, before the held itself is reconciled (which then finds it known).
func (d *Driver) adoptUndecided(n *nodeRec, h dispatch.Held) {
	for _, hj := range h.Jobs {
		id := hj.Job
		j := d.limbo.jobs[id]
		if j == nil {
			continue
		}
		delete(d.limbo.jobs, id)
		j.rec.State, j.rec.Node = store.JobRunning, n.name
		d.addJob(j)
		d.saveJob(j, true)
		d.exec(d.step(sched.Restore{Jobs: []sched.RestoredJob{d.restoredJob(j)}}))
		d.log.Info("undecided job adopted: its node's held lists it", logkey.JobID, id, logkey.NodeID, n.name)
		d.audit("hub", "job.adopted", id, "after the takeover, node "+n.name+" held it")
	}
}

// heldCame notes that node's held came; the last awaited one decides.
func (d *Driver) heldCame(node string) {
	if d.limbo.awaiting[node] {
		delete(d.limbo.awaiting, node)
		d.settleLimbo(false)
	}
}

// limboTick forgets the undecided jobs once job_lost_after has passed
// since the takeover.
func (d *Driver) limboTick(now time.Time) {
	if len(d.limbo.jobs) > 0 && !now.Before(d.limbo.deadline) {
		d.settleLimbo(true)
	}
}

// settleLimbo forgets the undecided jobs once every awaited held came
// (or at the deadline): no node holds them, so their relays resubmit.
func (d *Driver) settleLimbo(deadline bool) {
	if len(d.limbo.jobs) == 0 || !deadline && (!d.limbo.heard || len(d.limbo.awaiting) > 0) {
		return
	}
	for _, id := range sortedKeys(d.limbo.jobs) {
		j := d.limbo.jobs[id]
		adm := j.rec.Admission
		d.w.doKey("job:"+id, func(ctx context.Context) error {
			if err := d.st.DeleteJob(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			return d.out.Drop(ctx, id)
		})
		if adm != "" {
			d.w.doKey("adm:"+adm, func(ctx context.Context) error {
				if err := d.st.DeleteAdmission(ctx, adm); err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				return nil
			})
		}
		d.log.Info("job forgotten: no node held it after the takeover; its relay submits it again", logkey.JobID, id,
			logkey.GitLabJobID, j.rec.GitLabJobID, "deadline", deadline)
		d.audit("hub", "job.forgotten", id, "no node held it after the takeover; the relay resubmits it")
	}
	d.limbo.jobs, d.limbo.awaiting = nil, nil
}

// restoredJob is the core's view of a job a node runs, from its record.
func (d *Driver) restoredJob(j *jobRec) sched.RestoredJob {
	r := j.rec
	pl, _ := parsePlacementKey(r.Placement)
	aid, _ := parseAdmission(r.Admission)
	run, _ := d.ids.runner(r.Principal, r.Runner)
	return sched.RestoredJob{Job: j.sid, Node: d.ids.node(r.Node), Runner: run,
		Tenant: d.ids.tenant(r.Tenant), Relay: d.ids.relay(r.Principal), Admission: aid,
		Envelope: envelopeToSched(pl.Envelope)}
}
