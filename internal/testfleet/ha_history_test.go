package testfleet_test

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/testfleet"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/loop"
)

func rankOf(s client.JobState) int {
	switch s {
	case client.JobRunning:
		return 1
	case client.JobFinished:
		return 2
	}
	return 0
}

// answerOf classifies a hub call's error: ok, gone (404, 410) or
// conflict (409); false when the hub gave no answer that says what
// happened (transport error, timeout, 503, any other status).
func answerOf(err error) (string, bool) {
	var se *client.StatusError
	switch {
	case err == nil:
		return ansOK, true
	case errors.As(err, &se) && (se.Status == http.StatusNotFound || se.Status == http.StatusGone):
		return ansGone, true
	case errors.As(err, &se) && se.Status == http.StatusConflict:
		return ansConflict, true
	}
	return "", false
}

// historyRecorder keeps every answered client-API operation of the soak:
// the relay's own (through [recordingHub], wrapped around its hub client)
// and a few concurrent readers' job views, and which GitLab job each hub
// job is (from the store, which keeps settled jobs).
type historyRecorder struct {
	f    *testfleet.Fleet
	hc   *hubclient.Client // the readers' client, through the relay's enrolment
	t0   time.Time
	mu   sync.Mutex
	ops  []porcupine.Operation // guarded by mu
	jobs map[string]int64      // hub job ID → GitLab job ID; guarded by mu
	// firstTry is when each submission (by request_id) was first sent;
	// guarded by mu. See [historyRecorder.submitted].
	firstTry map[string]int64
}

func newHistoryRecorder() *historyRecorder {
	return &historyRecorder{t0: time.Now(), jobs: map[string]int64{}, firstTry: map[string]int64{}}
}

// submitted returns when the submission with requestID was first sent,
// remembering call if this is its first try. A submission the relay sends
// again with the same request_id (its first try's answer lost: a killed
// instance, a cut connection) is one operation, not two: API-43 replays
// the first answer, the view of the job as it was made, so that answer
// belongs at the job's making, which may be long before the try that
// heard it. Recorded from its own try, the replayed view could read as a
// view going back (a reader having seen the job run in between), which
// the API does not promise against.
func (r *historyRecorder) submitted(requestID string, call int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if first, ok := r.firstTry[requestID]; ok {
		return first
	}
	r.firstTry[requestID] = call
	return call
}

// attach gives the recorder its fleet and a reader's client of the
// tenant's relay enrolment.
func (r *historyRecorder) attach(t *testing.T, f *testfleet.Fleet, tn *testfleet.Tenant) {
	e, err := hubclient.LoadEnrolment(tn.Relay.Dir)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := hubclient.New(hubclient.Config{HubURL: e.HubURL, CAPEM: e.CAPEM, Key: e.Key, Principal: e.ID, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.f, r.hc = f, hc
}

func (r *historyRecorder) now() int64 { return time.Since(r.t0).Nanoseconds() }

func (r *historyRecorder) add(client int, call int64, op, key string, out apiOut) {
	ret := r.now()
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: apiIn{Op: op, Key: key}, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
}

// view records a job view answer (or its 404/410).
func (r *historyRecorder) view(client int, call int64, id string, v client.JobView, err error) {
	ans, ok := answerOf(err)
	switch {
	case !ok, ans == ansConflict:
		return
	case ans == ansGone:
		r.add(client, call, opView, "job:"+id, apiOut{Err: ans})
	default:
		r.add(client, call, opView, "job:"+v.ID, apiOut{Rank: rankOf(v.State), Rev: v.Revision})
	}
}

// grant records a grant on its reservation and its admission.
func (r *historyRecorder) grant(call int64, g client.ReservationGrant) {
	r.add(0, call, opGrant, "res:"+g.Reservation, apiOut{})
	r.add(0, call, opGrant, "adm:"+g.Admission, apiOut{})
}

// plain records a call answered with no body.
func (r *historyRecorder) plain(call int64, op, key string, err error) {
	if ans, ok := answerOf(err); ok {
		r.add(0, call, op, key, apiOut{Err: ans})
	}
}

// mapJobs reads the store's job list (one database) and remembers which
// GitLab job each hub job is; it returns the IDs.
func (r *historyRecorder) mapJobs(ctx context.Context) []string {
	js, err := r.f.Hub().Jobs(ctx)
	if err != nil {
		return nil
	}
	ids := make([]string, 0, len(js))
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range js {
		ids = append(ids, j.ID)
		r.jobs[j.ID] = j.GitLabJobID
	}
	return ids
}

// gitlabJob returns the GitLab job a hub job is, if the recorder saw it.
func (r *historyRecorder) gitlabJob(id string) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.jobs[id]
	return g, ok
}

// run reads every job's view until ctx ends, with readers concurrent
// readers (clients 1…readers).
func (r *historyRecorder) run(ctx context.Context, readers int) {
	var wg sync.WaitGroup
	for c := range readers {
		wg.Go(func() {
			for ctx.Err() == nil {
				for _, id := range r.mapJobs(ctx) {
					call := r.now()
					v, err := r.hc.GetJob(ctx, id, 0, 0)
					r.view(c+1, call, id, v, err)
				}
				pause(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// check runs porcupine over the history; a checker timeout is a failure.
// It returns the operations checked and the checker's time. The whole
// history goes into ev when the check fails or -soak.keep is set, with a
// visualization of each object the model refuses.
func (r *historyRecorder) check(t *testing.T, ev *soakEvidence) (int, time.Duration) {
	r.mu.Lock()
	ops := r.ops
	r.mu.Unlock()
	began := time.Now()
	res := porcupine.CheckOperationsTimeout(apiModel, ops, 2*time.Minute)
	took := time.Since(began)
	t.Logf("client-API history: %d operations checked in %v: %s", len(ops), took.Round(time.Millisecond), res)
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Error("the linearizability check timed out: that counts as a failure")
	default:
		bad := illegalKeys(ops)
		t.Errorf("the client-API history is not linearizable against the model: %s", bad)
		for _, part := range apiModel.Partition(ops) {
			k := part[0].Input.(apiIn).Key
			if !slices.Contains(bad, k) {
				continue
			}
			if k == bad[0] {
				slices.SortFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
				for _, op := range part[:min(len(part), 60)] {
					t.Logf("  %s: client %d [%v, %v] %s", k, op.ClientId, time.Duration(op.Call), time.Duration(op.Return),
						apiModel.DescribeOperation(op.Input, op.Output))
				}
			}
			if path, err := ev.visualize(k, part); err != nil {
				t.Errorf("visualizing %s: %v", k, err)
			} else {
				t.Logf("%s's operations, visualized: %s", k, path)
			}
		}
	}
	if t.Failed() || *soakKeep != "" {
		if err := ev.writeHistory(ops); err != nil {
			t.Errorf("writing the history: %v", err)
		}
	}
	return len(ops), took
}

// illegalKeys names the objects whose own history fails the model.
func illegalKeys(ops []porcupine.Operation) []string {
	var bad []string
	for _, part := range apiModel.Partition(ops) {
		if porcupine.CheckOperationsTimeout(apiModel, part, 10*time.Second) != porcupine.Ok {
			bad = append(bad, part[0].Input.(apiIn).Key)
		}
		if len(bad) == 10 {
			break
		}
	}
	return bad
}

// recordingHub is the relay's hub client, recording each answered call
// into the history.
type recordingHub struct {
	loop.Hub
	r *historyRecorder
}

func (h recordingHub) Reserve(ctx context.Context, req client.ReservationRequest) (hubclient.Reserved, error) {
	call := h.r.now()
	res, err := h.Hub.Reserve(ctx, req)
	h.reserved(call, res, err)
	return res, err
}

// OutcomeNext records what the outcome's next reservation request was
// answered, as Reserve does (the outcome itself is not modelled).
func (h recordingHub) OutcomeNext(ctx context.Context, admission string, o client.Outcome, next client.ReservationRequest) (hubclient.Reserved, error) {
	call := h.r.now()
	res, err := h.Hub.OutcomeNext(ctx, admission, o, next)
	h.reserved(call, res, err)
	return res, err
}

// reserved records a reservation request's answer: a grant, or a ticket
// queued.
func (h recordingHub) reserved(call int64, res hubclient.Reserved, err error) {
	switch {
	case err != nil:
	case res.Grant != nil:
		h.r.grant(call, *res.Grant)
	case res.Ticket != "":
		h.r.add(0, call, opTicket, "tk:"+res.Ticket, apiOut{})
	}
}

func (h recordingHub) PollTicket(ctx context.Context, ticket string, wait time.Duration) (hubclient.Reserved, error) {
	call := h.r.now()
	res, err := h.Hub.PollTicket(ctx, ticket, wait)
	switch {
	case err != nil:
	case res.Gone:
		h.r.add(0, call, opPoll, "tk:"+ticket, apiOut{Err: ansGone})
	case res.Grant != nil:
		h.r.add(0, call, opPoll, "tk:"+ticket, apiOut{Res: res.Grant.Reservation})
		h.r.grant(call, *res.Grant)
	default:
		h.r.add(0, call, opPoll, "tk:"+ticket, apiOut{})
	}
	return res, err
}

func (h recordingHub) CancelTicket(ctx context.Context, ticket string) error {
	call := h.r.now()
	err := h.Hub.CancelTicket(ctx, ticket)
	h.r.plain(call, opCancelT, "tk:"+ticket, err)
	return err
}

func (h recordingHub) Claim(ctx context.Context, id string) error {
	call := h.r.now()
	err := h.Hub.Claim(ctx, id)
	h.r.plain(call, opClaim, "adm:"+id, err)
	return err
}

func (h recordingHub) Renew(ctx context.Context, id string, leaseSecs int) (client.ReservationGrant, error) {
	call := h.r.now()
	g, err := h.Hub.Renew(ctx, id, leaseSecs)
	h.r.plain(call, opRenew, "res:"+id, err)
	return g, err
}

func (h recordingHub) Release(ctx context.Context, id string) error {
	call := h.r.now()
	err := h.Hub.Release(ctx, id)
	h.r.plain(call, opRelease, "res:"+id, err)
	return err
}

func (h recordingHub) SubmitJob(ctx context.Context, sub client.JobSubmission) (client.JobView, error) {
	call := h.r.submitted(sub.RequestID, h.r.now())
	v, err := h.Hub.SubmitJob(ctx, sub)
	if err == nil {
		h.r.view(0, call, v.ID, v, nil)
	}
	return v, err
}

func (h recordingHub) GetJob(ctx context.Context, id string, after uint64, wait time.Duration) (client.JobView, error) {
	call := h.r.now()
	v, err := h.Hub.GetJob(ctx, id, after, wait)
	h.r.view(0, call, id, v, err)
	return v, err
}

func (h recordingHub) Cancel(ctx context.Context, id string, mode client.CancelMode) (client.JobView, error) {
	call := h.r.now()
	v, err := h.Hub.Cancel(ctx, id, mode)
	h.r.view(0, call, id, v, err)
	return v, err
}

func (h recordingHub) Settle(ctx context.Context, id string) error {
	call := h.r.now()
	err := h.Hub.Settle(ctx, id)
	h.r.plain(call, opSettle, "job:"+id, err)
	return err
}

func (h recordingHub) ReadOutput(ctx context.Context, id string, offset int64, wait time.Duration) (hubclient.Output, error) {
	call := h.r.now()
	o, err := h.Hub.ReadOutput(ctx, id, offset, wait)
	switch ans, ok := answerOf(err); {
	case errors.Is(err, hubclient.ErrPastEnd):
		h.r.add(0, call, opOutput, "job:"+id, apiOut{Len: o.Length})
	case ok && ans == ansOK:
		h.r.add(0, call, opOutput, "job:"+id, apiOut{Len: o.Length, Complete: o.Complete, Data: len(o.Data) > 0})
	case ok && ans == ansGone:
		h.r.add(0, call, opOutput, "job:"+id, apiOut{Err: ans})
	}
	return o, err
}
