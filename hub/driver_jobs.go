package hub

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/vk-ci/vk/hub/api"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/sched"
)

// Submit implements api.Backend (API-07, API-31..35, ARB-36, ARB-37). The
// store gets the redacted spec only; the full spec stays in memory until a
// node accepted the job (AUTH-07). Any 4xx refusal ends the submission's
// admission as empty (API-34). A new job's record is stored together with
// its request_id answer ans (API-42), in one write.
func (d *Driver) Submit(ctx context.Context, p api.Principal, sub client.JobSubmission, ans store.Answer) (client.JobView, *store.Answer, error) {
	redacted, err := json.Marshal(sub.Spec.Redacted())
	if err != nil {
		return client.JobView{}, nil, &api.Error{Code: client.CodeInvalid, Msg: "spec does not encode", Err: err}
	}
	r := &submitReq{principal: p.ID, sub: sub, redacted: redacted, ans: ans}
	if err = d.call(ctx, r); err != nil || r.saved == nil {
		return r.view, r.recorded, err
	}
	v, err := d.durableView(ctx, r.view, r.saved)
	return v, r.recorded, err
}

type submitReq struct {
	reply
	principal string
	sub       client.JobSubmission
	redacted  []byte
	ans       store.Answer // the answer to store with a new job
	view      client.JobView
	recorded  *store.Answer // ans completed and stored; nil when no job was made
	saved     *writeDone    // the write of view's revision, for an existing job

	// Between stage and finish: the job the core took, whose record
	// (with ans) is to be written, and what the store answered.
	made    *newJob
	created error
}

// run carries out one submission alone (the loop's handle carries out
// those that arrive together).
func (r *submitReq) run(d *Driver) { d.submitTogether([]*submitReq{r}) }

// stage checks the submission and steps it into the core. It carries out
// nothing else: a job the core took waits in r.made for its record's
// write, and what the step asked for waits for finish, so that
// submissions staged together can have their records written at once
// ([Driver.submitTogether]).
func (r *submitReq) stage(d *Driver) {
	r.made, r.view, r.err = d.submit(r.principal, r.sub, r.redacted, r.ans)
}

// writes reports whether stage made a job whose record is to be written.
func (r *submitReq) writes() bool { return r.made != nil && r.made.j != nil }

// finish carries out what stage left, once the new job's record write
// (if any) returned with r.created.
func (r *submitReq) finish(d *Driver) {
	if r.made != nil {
		r.view, r.recorded, r.err = d.jobWritten(r.made, r.created)
	} else if j := d.job(r.view.ID); r.err == nil && j != nil {
		r.saved = j.saved // the same submission again: an existing job's view
	}
	var ae *api.Error
	if errors.As(r.err, &ae) && ae.Code.Status() >= 400 && ae.Code.Status() < 500 {
		d.endAdmission(r.principal, r.sub.Admission)
	}
}

// EndAdmission implements api.Backend (API-34).
func (d *Driver) EndAdmission(ctx context.Context, p api.Principal, admission string) {
	d.ask(ctx, &endAdmissionReq{principal: p.ID, admission: admission})
}

type endAdmissionReq struct{ principal, admission string }

func (r *endAdmissionReq) run(d *Driver) { d.endAdmission(r.principal, r.admission) }

// endAdmission ends a refused job's admission as empty (API-34), whether
// or not its outcome job was reported first (sched.SubmissionRefused). A
// grant not yet claimed is released instead.
func (d *Driver) endAdmission(principal, admission string) {
	aid, ok := parseAdmission(admission)
	if !ok {
		return
	}
	if a, ok := d.admission(aid); !ok || a.owner != principal || a.Job != 0 {
		return
	}
	acts := d.step(sched.SubmissionRefused{Admission: aid})
	ended := slices.ContainsFunc(acts, func(x sched.Action) bool {
		e, ok := x.(sched.AdmissionEnded)
		return ok && e.Admission == aid
	})
	d.exec(acts)
	if !ended {
		d.stepExec(sched.Released{Admission: aid})
	}
}

// submit checks a submission and, when it may make a job, stages it
// ([Driver.stageJob]). It returns the staged job, or the view of the job
// an earlier submission of the same request made, or the refusal.
func (d *Driver) submit(principal string, sub client.JobSubmission, redacted []byte, ans store.Answer) (*newJob, client.JobView, error) {
	r := d.relays[principal]
	if r == nil {
		return nil, client.JobView{}, &api.Error{Code: client.CodeUnavailable, Msg: "relay session not connected", RetryAfter: 1}
	}
	rr, ok := r.runners[sub.Runner]
	if !ok {
		return nil, client.JobView{}, &api.Error{Code: client.CodeUnavailable, Msg: "runner " + sub.Runner + " not in the relay's session report", RetryAfter: 1}
	}
	if r.noWork {
		return nil, client.JobView{}, errOldRelay
	}
	if err := d.checkJobApproval(r, sub); err != nil {
		return nil, client.JobView{}, err
	}
	ev := sched.JobSubmitted{Runner: rr.id, Project: projectKey(sub.Spec.GitLabCI.Job.ProjectID), Ref: sub.Spec.GitLabCI.Sources.Ref,
		Images: builtImages(sub.Spec), Name: sub.Spec.GitLabCI.Job.Name}
	ev.PlaceWithin = time.Duration(cmp.Or(sub.PlaceWithinSecs, d.cfg.Jobs.PlaceWithinSecs)) * time.Second
	var adm admission // the core's admission before the job takes it
	if sub.Admission != "" {
		aid, ok := parseAdmission(sub.Admission)
		if !ok {
			return nil, client.JobView{}, api.Errorf(client.CodeInvalid, "malformed admission ID %q", sub.Admission)
		}
		a, known := d.admission(aid)
		if j := d.sameSubmission(principal, sub, known); j != nil {
			return nil, d.liveView(j), nil
		}
		switch {
		case known && a.owner != principal:
			return nil, client.JobView{}, notFound("admission")
		case known && a.Job != 0:
			return nil, client.JobView{}, api.Errorf(client.CodeConflict, "admission already used by job %s", d.jobWire(a.Job)) // API-32
		case known && (a.runner != sub.Runner || a.Reservation != 0 && envelopeFromSched(a.Envelope) != sub.Placement.Envelope):
			return nil, client.JobView{}, api.Errorf(client.CodeForbidden, "job does not match its admission's runner, tenant or placement") // API-31
		case known && sub.Reservation != "" && a.Reservation != 0 && sub.Reservation != reservationWire(a.Reservation):
			return nil, client.JobView{}, api.Errorf(client.CodeForbidden, "job does not match its admission's reservation")
		}
		ev.Admission, adm = aid, a
	}
	if sub.Reservation != "" {
		rid, ok := parseReservation(sub.Reservation)
		if !ok {
			return nil, client.JobView{}, api.Errorf(client.CodeInvalid, "malformed reservation ID %q", sub.Reservation)
		}
		ev.Reservation = rid
	}
	if !samePlacement(rr.placement, sub.Placement) {
		return nil, client.JobView{}, api.Errorf(client.CodeForbidden, "placement differs from runner %s's reported placement", sub.Runner)
	}
	d.nextJob++
	ev.Job = sched.JobID(d.nextJob)
	return d.stageJob(principal, sub, redacted, ans, rr, ev, adm)
}

// sameSubmission returns the job an earlier submission of sub (same
// principal, admission and request_id) created, when its request_id
// answer was never stored: a leader that died between storing the job
// and storing the answer leaves the job undecided at the takeover (or
// adopted since), with its admission out of the core, and the relay
// repeats the submission it never heard answered. That repeat must find
// the job, not read 404 for the admission (the relay would fail the
// job) or make a second one (DECISIONS 16). Undecided jobs are few and
// always looked at; the held ones only when the core does not know the
// admission, the rare case where this can happen.
func (d *Driver) sameSubmission(principal string, sub client.JobSubmission, known bool) *jobRec {
	same := func(j *jobRec) bool {
		return j.rec.Principal == principal && j.rec.Admission == sub.Admission && j.rec.RequestID == sub.RequestID
	}
	for _, j := range d.limbo.jobs {
		if same(j) {
			return j
		}
	}
	if !known {
		for _, j := range d.jobs {
			if same(j) {
				return j
			}
		}
	}
	return nil
}

// newJob is a submission stepped into the core: the job the core took,
// staged for its record's write (with its answer), or the core's refusal;
// and the actions of its step, which are carried out only once the
// record's write returned ([Driver.jobWritten]).
type newJob struct {
	refused   error // the core's verdict; j is nil
	j         *jobRec
	ans       store.Answer
	acts      []sched.Action
	principal string
	sub       client.JobSubmission
	rr        runnerRec
	adm       admission      // the core's admission before the job took it
	starts    bool           // the core starts it at once
	view      client.JobView // its view as ans has it
}

// stageJob steps a checked submission into the core and, if it takes it,
// makes the job's record and its request_id answer ans, to be written in
// one write before its 201. When the core starts the job at once, the
// record is made as that Start leaves it (starting on its node): the 201
// and its stored answer say so, and the start frame goes out once the
// record is durable ([Driver.jobWritten]). A refusal's actions wait for
// jobWritten too, since they may start a job staged with this one.
func (d *Driver) stageJob(principal string, sub client.JobSubmission, redacted []byte, ans store.Answer, rr runnerRec, ev sched.JobSubmitted, adm admission) (*newJob, client.JobView, error) {
	acts := d.step(ev)
	if err := verdictError(verdictOf(acts)); err != nil {
		return &newJob{acts: acts, refused: err}, client.JobView{}, nil
	}
	now := d.now()
	spec := sub.Spec
	ci := spec.GitLabCI
	j := &jobRec{sid: ev.Job, spec: &spec, name: ci.Job.Name, wake: make(chan struct{}), rec: store.Job{
		ID: newJobID(), Principal: principal, Runner: sub.Runner, Tenant: rr.tenant, Instance: store.InstanceKey(ci.ServerURL),
		Project: ci.Job.ProjectID, GitLabJobID: ci.Job.ID, Admission: sub.Admission, Reservation: sub.Reservation,
		Placement: placementKey(sub.Placement), RequestID: sub.RequestID, State: store.JobQueued, Revision: 1,
		Spec: redacted, Created: now, Updated: now,
	}}
	start, starts := startOf(acts, ev.Job)
	if starts {
		j.rec.State, j.rec.Node, j.rec.Revision = store.JobStarting, d.ids.nodeName(start.Node), j.rec.Revision+1
	}
	view := d.liveView(j)
	body, _ := json.Marshal(view)
	ans.Status, ans.Body, ans.Job = http.StatusCreated, append(body, '\n'), j.rec.ID
	nj := &newJob{j: j, ans: ans, acts: acts, principal: principal, sub: sub, rr: rr, adm: adm, starts: starts, view: view}
	return nj, view, nil
}

// jobWritten carries out a staged job once its record's write returned
// with err: on success it holds the job, records its admission's job,
// and carries out its step's actions (the start frame among them); on
// failure it takes the job back out of the core, so nothing starts it.
// A refusal's actions are carried out, and the refusal returned.
func (d *Driver) jobWritten(nj *newJob, err error) (client.JobView, *store.Answer, error) {
	j, sub, adm := nj.j, nj.sub, nj.adm
	if nj.refused != nil {
		d.exec(nj.acts)
		return client.JobView{}, nil, nj.refused
	}
	if err != nil {
		d.exec(d.step(sched.JobSettled{Job: j.sid}))
		return client.JobView{}, nil, &api.Error{Code: client.CodeInternal, Msg: "storing the job failed", Err: err}
	}
	ci := sub.Spec.GitLabCI
	d.addJob(j)
	d.traceQueue(j.sid, nj.rr.id, sub.Queue)
	if adm.id != 0 {
		d.dropTicket(adm.Ticket) // the admission's ticket is a job now
		if v, ok := d.core.Admission(adm.id); ok && v.Reservation != 0 {
			adm.Reservation, adm.Node = v.Reservation, v.Node
		}
		rec := d.admissionRecord(adm, j.rec.ID)
		d.w.doKey("adm:"+rec.ID, func(ctx context.Context) error { return d.st.PutAdmission(ctx, rec) })
	}
	d.log.Info("job submitted", logkey.JobID, j.rec.ID, logkey.RunnerID, sub.Runner, logkey.GitLabJobID, ci.Job.ID,
		logkey.Admission, sub.Admission, "spec", sub.Spec)
	d.audit(nj.principal, "job.submit", j.rec.ID, fmt.Sprintf("runner %s, GitLab job %d, project %d (%s), admission %s",
		sub.Runner, ci.Job.ID, ci.Job.ProjectID, ci.Job.ProjectPath, cmp.Or(sub.Admission, "none")))
	for _, a := range nj.acts {
		if s, ok := a.(sched.Start); ok && nj.starts && s.Job == j.sid {
			d.sendStart(j, s) // the full spec to the node; its record is stored
			continue
		}
		d.exec([]sched.Action{a})
	}
	ans := nj.ans
	return nj.view, &ans, nil
}

// startOf finds the Start of job among acts.
func startOf(acts []sched.Action, job sched.JobID) (sched.Start, bool) {
	for _, a := range acts {
		if s, ok := a.(sched.Start); ok && s.Job == job {
			return s, true
		}
	}
	return sched.Start{}, false
}

// Job implements api.Backend (API-07, API-11, API-36).
func (d *Driver) Job(ctx context.Context, p api.Principal, id string, after uint64, wait time.Duration) (client.JobView, error) {
	deadline := d.now().Add(wait)
	for {
		r := &jobReq{principal: p.ID, id: id}
		if err := d.ownJob(ctx, r); err != nil {
			return client.JobView{}, err
		}
		if !r.held {
			return d.settledView(ctx, p, id)
		}
		if r.view.Revision > after || wait <= 0 {
			v, err := d.durableView(ctx, r.view, r.saved)
			if err != nil || v.Revision > after || wait <= 0 {
				return v, err
			}
			// The newer revision's write failed and the store holds one
			// the caller has seen: look again in a second (the write is
			// made again, or the next revision comes).
			again := d.now().Add(time.Second)
			if deadline.Before(again) {
				again = deadline
			}
			woken, werr := d.wait(ctx, r.wake, again)
			if werr != nil {
				return client.JobView{}, werr
			}
			if !woken && !d.now().Before(deadline) {
				wait = 0
			}
			continue
		}
		woken, werr := d.wait(ctx, r.wake, deadline)
		if werr != nil {
			return client.JobView{}, werr
		}
		if !woken {
			wait = 0
		}
	}
}

// jobOp is what a jobReq does with its job.
type jobOp int

const (
	jobLook   jobOp = iota // its view, and the channel closed when it changes
	jobCancel              // cancel it in mode (API-40)
	jobSettle              // settle it (API-41)
)

// jobReq acts on job id, if the driver holds it (queued to finished, not
// yet settled) and principal owns it. held is false when the driver does
// not hold the job: the caller then reads the store ([Driver.settledView]).
// A held job another principal owns reads as not found (API-50: a relay
// never learns another's job exists).
type jobReq struct {
	reply
	principal, id string
	op            jobOp
	mode          client.CancelMode
	held          bool
	view          client.JobView
	wake          <-chan struct{}
	saved         *writeDone   // the write of view's revision (see Driver.durableView)
	durable       <-chan error // a settle's record write
}

// ownJob asks r; a malformed ID reads as not found.
func (d *Driver) ownJob(ctx context.Context, r *jobReq) error {
	if !validJobID(r.id) {
		return notFound("job")
	}
	return d.call(ctx, r)
}

func (r *jobReq) run(d *Driver) {
	j := d.job(r.id)
	if j == nil {
		r.settling(d)
		return
	}
	r.held = true
	if j.rec.Principal != r.principal {
		r.err = notFound("job")
		return
	}
	switch r.op {
	case jobSettle:
		r.durable, r.err = d.settleJob(j, r.principal)
		return
	case jobCancel:
		d.cancelJob(j, r.mode)
	}
	r.view, r.wake, r.saved = d.liveView(j), j.wake, j.saved
}

// settlingJob is a settled job whose settled record is not durable yet:
// the store may still hold an older revision (the finished write is
// queued before the settle's), so its view comes from memory until
// done closes.
type settlingJob struct {
	j     *jobRec
	wd    *writeDone // the settle's record write
	final *writeDone // the write of the finished revision its views show
}

// pruneSettling forgets the settling jobs whose settled record is
// durable (each tick): their views come from the store from now on.
func (d *Driver) pruneSettling() {
	for id, sj := range d.settling {
		select {
		case <-sj.wd.done:
			delete(d.settling, id)
		default:
		}
	}
}

// settling answers r for a job settled but not yet durable: its last
// view, final (the long poll's channel closes once the store holds it, so
// a waiting reader then reads the store), and for a repeated settle the
// same write to wait for. A job not settling is left to the store.
func (r *jobReq) settling(d *Driver) {
	sj := d.settling[r.id]
	if sj == nil {
		return
	}
	select {
	case <-sj.wd.done:
		delete(d.settling, r.id) // durable: the store has it
		return
	default:
	}
	r.held = true
	if sj.j.rec.Principal != r.principal {
		r.err = notFound("job")
		return
	}
	if r.op == jobSettle {
		ch := make(chan error, 1)
		go func() { <-sj.wd.done; ch <- sj.wd.err }()
		r.durable = ch
		return
	}
	r.view, r.wake, r.saved = sj.j.view(), sj.wd.done, sj.final
}

// durableView is view once saved, the write of its revision, is durable
// (at once when saved is nil), so that no client ever reads a revision
// the store may not hold: a new leader, like this hub restarted, restores
// the store's revision, and a view answered before its write would go
// back in state (finished, then running again). When the write failed,
// the view is the store's record of the job, the newest durable one
// (found by the HA soak's history check; TestViewOnlyOnceDurable).
func (d *Driver) durableView(ctx context.Context, view client.JobView, saved *writeDone) (client.JobView, error) {
	if saved == nil {
		return view, nil
	}
	select {
	case <-saved.done:
	case <-ctx.Done():
		return client.JobView{}, ctx.Err()
	}
	if saved.err == nil {
		return view, nil
	}
	rec, err := d.st.GetJob(ctx, view.ID)
	if err != nil {
		return client.JobView{}, &api.Error{Code: client.CodeUnavailable, Msg: "the job's record is not readable; retry", Err: err}
	}
	v := viewOfRecord(rec)
	v.OutputLen = max(v.OutputLen, view.OutputLen) // output is durable before it counts
	return v, nil
}

// settledView reads a job the driver no longer holds (settled) from the
// store.
func (d *Driver) settledView(ctx context.Context, p api.Principal, id string) (client.JobView, error) {
	r, err := d.st.GetJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && r.Principal != p.ID {
		return client.JobView{}, notFound("job")
	}
	if err != nil {
		return client.JobView{}, err
	}
	return viewOfRecord(r), nil
}

// OutputReadable implements api.Backend (API-37..39).
func (d *Driver) OutputReadable(ctx context.Context, p api.Principal, id string) error {
	r := &jobReq{principal: p.ID, id: id}
	if err := d.ownJob(ctx, r); err != nil || r.held {
		return err
	}
	if _, err := d.settledView(ctx, p, id); err != nil {
		return err
	}
	return api.Errorf(client.CodeNotFound, "the job is settled; its output was deleted (API-41)")
}

// Cancel implements api.Backend (API-40): a later immediate overrides an
// earlier graceful; a finished job is unchanged. A job no node has started
// ends canceled at once.
func (d *Driver) Cancel(ctx context.Context, p api.Principal, id string, mode client.CancelMode) (client.JobView, error) {
	r := &jobReq{principal: p.ID, id: id, op: jobCancel, mode: mode}
	if err := d.ownJob(ctx, r); err != nil {
		return client.JobView{}, err
	}
	if !r.held {
		return d.settledView(ctx, p, id)
	}
	return d.durableView(ctx, r.view, r.saved)
}

func (d *Driver) cancelJob(j *jobRec, mode client.CancelMode) {
	switch j.rec.State {
	case store.JobFinished:
	case store.JobQueued:
		j.rec.Cancel = store.CancelMode(mode)
		// The core ends the queued job canceled (EndJob) and keeps its
		// charge until the relay settles it (ARB-35).
		d.exec(d.step(sched.JobCancelled{Job: j.sid}))
		if j.rec.State != store.JobFinished {
			d.finishJob(j, client.JobResult{Failure: client.FailureCanceled, Message: "canceled before it was placed", OutputLen: j.outLen})
		}
	default:
		if j.rec.Cancel != store.CancelImmediate && j.rec.Cancel != store.CancelMode(mode) {
			j.rec.Cancel = store.CancelMode(mode)
			d.saveJob(j, true)
		}
		if n := d.nodes[j.rec.Node]; n != nil {
			d.sendTo(n, cancelFrame(j.rec.ID, client.CancelMode(j.rec.Cancel)))
		}
	}
}

// Settle implements api.Backend (API-41): 409 until finished; then the
// output is deleted and the record kept (Settled).
func (d *Driver) Settle(ctx context.Context, p api.Principal, id string) error {
	r := &jobReq{principal: p.ID, id: id, op: jobSettle}
	err := d.ownJob(ctx, r)
	if r.durable != nil {
		if e := <-r.durable; e != nil {
			return &api.Error{Code: client.CodeInternal, Msg: "recording the settle failed", Err: e}
		}
	}
	if err != nil || r.held {
		return err
	}
	_, err = d.settledView(ctx, p, id)
	return err // a settled job settles again: 204
}

// settleJob settles a held job by principal: the output is dropped and
// the record kept, Settled; durable reports that record's write.
func (d *Driver) settleJob(j *jobRec, principal string) (durable <-chan error, err error) {
	if j.rec.State != store.JobFinished {
		return nil, api.Errorf(client.CodeConflict, "job not finished yet")
	}
	id := j.rec.ID
	d.w.doKey("out:"+id, func(ctx context.Context) error { return d.out.Drop(ctx, id) })
	j.rec.Settled = true
	final := j.saved // the write of the revision settling views show
	durable = d.saveJob(j, false)
	d.exec(d.step(sched.JobSettled{Job: j.sid}))
	d.dropJob(j)
	// Until the settled record is durable, views come from memory: the
	// store may still hold a revision older than one a client read.
	if d.settling == nil {
		d.settling = map[string]*settlingJob{}
	}
	d.settling[id] = &settlingJob{j: j, wd: j.saved, final: final} // j.saved: the settle's write
	if _, ok := parseAdmission(j.rec.Admission); ok {
		adm := j.rec.Admission
		d.w.doKey("adm:"+adm, func(ctx context.Context) error { return d.st.DeleteAdmission(ctx, adm) })
	}
	d.audit(principal, "job.settle", id, "")
	d.log.Info("job settled", logkey.JobID, id)
	return durable, nil
}

// jobView converts a job record to its API view.
func (j *jobRec) view() client.JobView {
	v := client.JobView{ID: j.rec.ID, Revision: j.rec.Revision, State: client.JobState(j.rec.State),
		Node: j.rec.Node, Stage: j.rec.Stage, OutputLen: j.outLen, Cancel: client.CancelMode(j.rec.Cancel)}
	if j.rec.State == store.JobFinished {
		if j.result != nil {
			r := *j.result
			v.Result = &r
		} else {
			v.Result = &client.JobResult{Failure: client.FailureOther, OutputLen: j.outLen}
		}
	}
	return v
}

// viewOfRecord is the view of a job known only from the store (settled).
func viewOfRecord(r store.Job) client.JobView {
	j := &jobRec{rec: r, outLen: r.OutputLen}
	if len(r.Result) > 0 {
		var res client.JobResult
		if json.Unmarshal(r.Result, &res) == nil {
			j.result = &res
		}
	}
	return j.view()
}
