package realhub

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/proto/client"
)

// Tap wraps the relay's real hub client (the method set of relay/loop.Hub)
// and forwards every call to the real hub. It records what the relay asked
// and what the hub answered, so tests can check it, and injects faults the
// real hub cannot be made to answer at a chosen moment: FailNext answers a
// route's next calls with 503 unavailable without forwarding them (what the
// relay sees of a hub restarting or overloaded). A TLS-terminating proxy
// cannot stand here: every request is signed over the TLS session's
// exported keying material.
//
// Routes are the client.Route* constants of the call. Safe for concurrent
// use; Mu guards the exported fields.
type Tap struct {
	hub *hubclient.Client

	Mu      sync.Mutex
	change  chan struct{}
	Calls   map[string]int // calls by route, faulted ones included
	Answers map[string]int // calls the hub answered without error, by route
	// FailNext is the number of coming calls of a route to answer 503.
	FailNext map[string]int
	// Grants are the grants the hub gave, by admission.
	Grants map[string]client.ReservationGrant
	// Claimed admissions the hub accepted a claim of; ClaimCalls counts
	// every claim sent, by admission.
	Claimed    map[string]bool
	ClaimCalls map[string]int
	// Outcomes reported and accepted, by admission.
	Outcomes map[string][]client.Outcome
	// Released reservations: released by the relay, or ended by a
	// non-job outcome (ARB-34).
	Released map[string]bool
	// Subs are the submissions the hub accepted, by hub job ID.
	Subs map[string]client.JobSubmission
	// SubmitErrs are the errors submissions were answered with, and
	// Refused the submissions, in the same order.
	SubmitErrs []error
	Refused    []client.JobSubmission
	// Views are the latest job views the relay saw, by hub job ID.
	Views map[string]client.JobView
	// Settled counts accepted settles by hub job ID.
	Settled map[string]int
	// Cancels are the cancel modes asked, by hub job ID.
	Cancels map[string][]client.CancelMode
	// Output is each job's output as the hub served it, stitched from the
	// relay's reads by offset.
	Output map[string][]byte
	// Tickets are the tickets queued and not yet granted or cancelled.
	Tickets map[string]bool
	// NextAnswered counts the outcomes the hub took that carried a next
	// reservation request (OutcomeNext).
	NextAnswered int
	// OnSubmit, when set, runs before a submission is forwarded.
	OnSubmit func(client.JobSubmission)
	// Rewrite, when set, edits a submission before it is forwarded (and
	// after OnSubmit): a fault the relay never sends, for behaviour the
	// hub only shows on such a request (a short place_within_secs).
	Rewrite func(*client.JobSubmission)
}

// NewTap wraps c.
func NewTap(c *hubclient.Client) *Tap {
	return &Tap{hub: c, change: make(chan struct{}), Calls: map[string]int{}, Answers: map[string]int{},
		FailNext: map[string]int{}, Grants: map[string]client.ReservationGrant{}, Claimed: map[string]bool{}, ClaimCalls: map[string]int{},
		Outcomes: map[string][]client.Outcome{}, Released: map[string]bool{}, Subs: map[string]client.JobSubmission{},
		Views: map[string]client.JobView{}, Settled: map[string]int{}, Cancels: map[string][]client.CancelMode{},
		Tickets: map[string]bool{}, Output: map[string][]byte{}}
}

// Client returns the wrapped client.
func (t *Tap) Client() *hubclient.Client { return t.hub }

func (t *Tap) changedLocked() {
	close(t.change)
	t.change = make(chan struct{})
}

// enter counts a call of route and returns the injected fault, if any.
func (t *Tap) enter(route string) error {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	t.Calls[route]++
	t.changedLocked()
	if t.FailNext[route] > 0 {
		t.FailNext[route]--
		return &client.StatusError{Status: http.StatusServiceUnavailable,
			Body: client.Error{Error: "injected by realhub.Tap", Code: client.CodeUnavailable}}
	}
	return nil
}

// done records an answer under the lock with rec (nil: nothing more).
func (t *Tap) done(route string, err error, rec func()) {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	if err == nil {
		t.Answers[route]++
		if rec != nil {
			rec()
		}
	}
	t.changedLocked()
}

func (t *Tap) reserved(r hubclient.Reserved) {
	if r.Grant != nil {
		t.Grants[r.Grant.Admission] = *r.Grant
	}
	if r.Ticket != "" && r.Grant == nil {
		t.Tickets[r.Ticket] = true
	}
}

// Reserve forwards to the hub.
func (t *Tap) Reserve(ctx context.Context, req client.ReservationRequest) (hubclient.Reserved, error) {
	if err := t.enter(client.RouteReserve); err != nil {
		return hubclient.Reserved{}, err
	}
	r, err := t.hub.Reserve(ctx, req)
	t.done(client.RouteReserve, err, func() { t.reserved(r) })
	return r, err
}

// PollTicket forwards to the hub.
func (t *Tap) PollTicket(ctx context.Context, ticket string, wait time.Duration) (hubclient.Reserved, error) {
	if err := t.enter(client.RouteTicketGet); err != nil {
		return hubclient.Reserved{}, err
	}
	r, err := t.hub.PollTicket(ctx, ticket, wait)
	t.done(client.RouteTicketGet, err, func() {
		if r.Grant != nil {
			delete(t.Tickets, ticket)
		}
		t.reserved(r)
	})
	if err != nil {
		t.Mu.Lock()
		delete(t.Tickets, ticket)
		t.Mu.Unlock()
	}
	return r, err
}

// CancelTicket forwards to the hub.
func (t *Tap) CancelTicket(ctx context.Context, ticket string) error {
	if err := t.enter(client.RouteTicketDelete); err != nil {
		return err
	}
	err := t.hub.CancelTicket(ctx, ticket)
	t.done(client.RouteTicketDelete, err, func() { delete(t.Tickets, ticket) })
	return err
}

// Claim forwards to the hub.
func (t *Tap) Claim(ctx context.Context, id string) error {
	t.Mu.Lock()
	t.ClaimCalls[id]++
	t.Mu.Unlock()
	if err := t.enter(client.RouteClaim); err != nil {
		return err
	}
	err := t.hub.Claim(ctx, id)
	t.done(client.RouteClaim, err, func() { t.Claimed[id] = true })
	return err
}

// Renew forwards to the hub.
func (t *Tap) Renew(ctx context.Context, id string, leaseSecs int) (client.ReservationGrant, error) {
	if err := t.enter(client.RouteRenew); err != nil {
		return client.ReservationGrant{}, err
	}
	g, err := t.hub.Renew(ctx, id, leaseSecs)
	t.done(client.RouteRenew, err, nil)
	return g, err
}

// Release forwards to the hub.
func (t *Tap) Release(ctx context.Context, id string) error {
	if err := t.enter(client.RouteReservationDelete); err != nil {
		return err
	}
	err := t.hub.Release(ctx, id)
	t.done(client.RouteReservationDelete, err, func() { t.Released[id] = true })
	return err
}

// Outcome forwards to the hub.
func (t *Tap) Outcome(ctx context.Context, admission string, o client.Outcome) error {
	if err := t.enter(client.RouteOutcome); err != nil {
		return err
	}
	err := t.hub.Outcome(ctx, admission, o)
	t.done(client.RouteOutcome, err, func() { t.outcomeTaken(admission, o) })
	return err
}

// OutcomeNext forwards to the hub, counted under RouteOutcome; the
// outcome is recorded as Outcome records it, and next's answer as
// Reserve's is.
func (t *Tap) OutcomeNext(ctx context.Context, admission string, o client.Outcome, next client.ReservationRequest) (hubclient.Reserved, error) {
	if err := t.enter(client.RouteOutcome); err != nil {
		return hubclient.Reserved{}, err
	}
	r, err := t.hub.OutcomeNext(ctx, admission, o, next)
	t.done(client.RouteOutcome, err, func() {
		t.outcomeTaken(admission, o)
		t.NextAnswered++
		t.reserved(r)
	})
	return r, err
}

// outcomeTaken records an outcome the hub took; t.Mu is held.
func (t *Tap) outcomeTaken(admission string, o client.Outcome) {
	t.Outcomes[admission] = append(t.Outcomes[admission], o)
	if g, ok := t.Grants[admission]; ok && o != client.OutcomeJob {
		t.Released[g.Reservation] = true
	}
}

// SubmitJob forwards to the hub.
func (t *Tap) SubmitJob(ctx context.Context, sub client.JobSubmission) (client.JobView, error) {
	if err := t.enter(client.RouteSubmit); err != nil {
		return client.JobView{}, err
	}
	t.Mu.Lock()
	f, rw := t.OnSubmit, t.Rewrite
	t.Mu.Unlock()
	if f != nil {
		f(sub)
	}
	sent := sub
	if rw != nil {
		rw(&sent)
	}
	v, err := t.hub.SubmitJob(ctx, sent)
	t.done(client.RouteSubmit, err, func() { t.Subs[v.ID] = sub; t.Views[v.ID] = v })
	if err != nil {
		t.Mu.Lock()
		t.SubmitErrs = append(t.SubmitErrs, err)
		t.Refused = append(t.Refused, sub)
		t.Mu.Unlock()
	}
	return v, err
}

// GetJob forwards to the hub.
func (t *Tap) GetJob(ctx context.Context, id string, after uint64, wait time.Duration) (client.JobView, error) {
	if err := t.enter(client.RouteJobGet); err != nil {
		return client.JobView{}, err
	}
	v, err := t.hub.GetJob(ctx, id, after, wait)
	t.done(client.RouteJobGet, err, func() {
		if v.Revision >= t.Views[id].Revision {
			t.Views[id] = v
		}
	})
	return v, err
}

// ReadOutput forwards to the hub.
func (t *Tap) ReadOutput(ctx context.Context, id string, offset int64, wait time.Duration) (hubclient.Output, error) {
	if err := t.enter(client.RouteOutput); err != nil {
		return hubclient.Output{}, err
	}
	o, err := t.hub.ReadOutput(ctx, id, offset, wait)
	t.done(client.RouteOutput, err, func() {
		b := t.Output[id]
		if o.Offset <= int64(len(b)) {
			end := o.Offset + int64(len(o.Data))
			if end > int64(len(b)) {
				t.Output[id] = append(b[:o.Offset:o.Offset], o.Data...)
			}
		}
	})
	return o, err
}

// Cancel forwards to the hub.
func (t *Tap) Cancel(ctx context.Context, id string, mode client.CancelMode) (client.JobView, error) {
	if err := t.enter(client.RouteCancel); err != nil {
		return client.JobView{}, err
	}
	t.Mu.Lock()
	t.Cancels[id] = append(t.Cancels[id], mode)
	t.Mu.Unlock()
	v, err := t.hub.Cancel(ctx, id, mode)
	t.done(client.RouteCancel, err, nil)
	return v, err
}

// Settle forwards to the hub.
func (t *Tap) Settle(ctx context.Context, id string) error {
	if err := t.enter(client.RouteSettle); err != nil {
		return err
	}
	err := t.hub.Settle(ctx, id)
	t.done(client.RouteSettle, err, func() { t.Settled[id]++ })
	return err
}

// SetFail makes the next n calls of route answer 503.
func (t *Tap) SetFail(route string, n int) {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	t.FailNext[route] = n
}

// Count returns the calls of route so far.
func (t *Tap) Count(route string) int {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	return t.Calls[route]
}

// WaitFor waits until cond (called with Mu held) holds, woken by every
// call and answer; it fails tb after 60 s.
func (t *Tap) WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for {
		t.Mu.Lock()
		ok := cond()
		ch := t.change
		t.Mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			tb.Fatalf("realhub: timed out waiting for %s", what)
		case <-tb.Context().Done():
			tb.Fatalf("realhub: test ended waiting for %s", what)
		}
	}
}

// OnlyJob waits for the single accepted submission and returns its hub
// job ID.
func (t *Tap) OnlyJob(tb testing.TB) string {
	tb.Helper()
	var id string
	t.WaitFor(tb, "a submitted job", func() bool {
		for k := range t.Subs {
			id = k
		}
		return len(t.Subs) == 1
	})
	return id
}

// Sub returns the accepted submission of hub job id.
func (t *Tap) Sub(id string) client.JobSubmission {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	return t.Subs[id]
}

// GivenBack reports whether the relay gave admission's grant back: the
// hub accepted a non-job outcome for it (the hub then ends its
// reservation, ARB-34) or a release of its reservation. Call with Mu held.
func (t *Tap) GivenBack(admission string) bool {
	for _, o := range t.Outcomes[admission] {
		if o != client.OutcomeJob {
			return true
		}
	}
	g, ok := t.Grants[admission]
	return ok && t.Released[g.Reservation]
}

// AdmissionsWith returns the admissions whose accepted outcomes equal
// want, in no order.
func (t *Tap) AdmissionsWith(want ...client.Outcome) []string {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	return t.admissionsWithLocked(want)
}

func (t *Tap) admissionsWithLocked(want []client.Outcome) []string {
	var out []string
	for id, os := range t.Outcomes {
		if len(os) == len(want) {
			same := true
			for i := range os {
				same = same && os[i] == want[i]
			}
			if same {
				out = append(out, id)
			}
		}
	}
	return out
}

// AdmissionsWithLocked is AdmissionsWith for a caller holding Mu (inside
// a WaitFor condition).
func (t *Tap) AdmissionsWithLocked(want ...client.Outcome) []string {
	return t.admissionsWithLocked(want)
}
