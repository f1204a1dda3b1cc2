package hub

import (
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
