package hub

import (
	"strconv"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/ui"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/sched"
)

// "Why is my job waiting", with numbers: the scheduler's wait reason,
// position and estimated wait of a queued job (its API view) and of every
// entry of the operators' queue.

// liveView is the job's API view with its wait while queued. On the
// driver's goroutine.
func (d *Driver) liveView(j *jobRec) client.JobView {
	v := j.view()
	v.Wait = d.jobWait(j)
	return v
}

// jobWait is why a queued job waits; nil once a node was chosen. On the
// driver's goroutine.
func (d *Driver) jobWait(j *jobRec) *client.JobWait {
	if j.rec.State != store.JobQueued {
		return nil
	}
	v, ok := d.core.Job(j.sid)
	if !ok || v.Wait.Code == sched.ReasonNone || v.Wait.Code == sched.ReasonStarting {
		return nil
	}
	p, _ := d.core.JobPosition(j.sid)
	return &client.JobWait{Reason: v.Wait.Text(), Class: p.Class, Ahead: p.Ahead, Waiting: p.Waiting,
		EstimatedSecs: estimateSecs(p)}
}

// estimateSecs is p's estimated wait in whole seconds (rounded up), nil
// when unknown.
func estimateSecs(p sched.Position) *int64 {
	if !p.WaitKnown {
		return nil
	}
	s := int64((p.Wait + time.Second - 1) / time.Second)
	return &s
}

// withPosition fills a queue entry's class, position, estimate and the
// time it has waited.
func (d *Driver) withPosition(w *ui.Waiting, p sched.Position, ok bool) {
	if !w.Since.IsZero() {
		w.WaitedSecs = max(int64(d.now().Sub(w.Since)/time.Second), 0)
	}
	if !ok {
		return
	}
	w.Class, w.Ahead, w.Competing = p.Class, p.Ahead, p.Waiting
	w.EstimatedSecs = estimateSecs(p)
}

// Kinds of vk_hub_wait_seconds.
const (
	waitTicket = "ticket"
	waitJob    = "job"
)

// observeWait records in vk_hub_wait_seconds that a request of placement
// pl waiting since since got its node now.
func (d *Driver) observeWait(kind string, pl client.Placement, since time.Time) {
	if since.IsZero() {
		return
	}
	d.met.observeHist("vk_hub_wait_seconds", max(d.now().Sub(since), 0).Seconds(), "kind", kind, "size", sizeClass(pl.Envelope.CPUs))
}

// observeJobWait records a job's wait from its submission to its node
// running it.
func (d *Driver) observeJobWait(j *jobRec) {
	if p, ok := parsePlacementKey(j.rec.Placement); ok {
		d.observeWait(waitJob, p, j.rec.Created)
	}
}

// sizeClass is the size label of an envelope of cpus vCPUs: rounded up
// to a power of two, "over64" past 64, so the label set stays bounded.
func sizeClass(cpus int) string {
	if cpus > 64 {
		return "over64"
	}
	c := 1
	for c < cpus {
		c *= 2
	}
	return strconv.Itoa(c)
}
