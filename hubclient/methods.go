package hubclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/vk-ci/vk/proto/client"
)

// Capacity asks POST /v1/capacity (API-02, API-13): 200 Capacity. A
// req.WaitSecs long poll extends the request's deadline.
func (c *Client) Capacity(ctx context.Context, req client.CapacityRequest) (client.Capacity, error) {
	var out client.Capacity
	a, err := c.do(ctx, http.MethodPost, "/v1/capacity", nil, req, secs(req.WaitSecs))
	if err != nil {
		return out, err
	}
	if err := a.expect("capacity", http.StatusOK); err != nil {
		return out, err
	}
	return out, a.decode("capacity", &out)
}

// Reserved is the answer to a reservation request or a ticket poll:
// exactly one of Grant (201) and Ticket (202) is set, unless Gone.
type Reserved struct {
	// Grant is the reservation a node accepted (201); nil otherwise.
	Grant *client.ReservationGrant
	// Ticket is the queued request's ticket (202); empty with a grant.
	Ticket string
	// Gone reports a ticket poll answered 410 reservation_gone (the ticket
	// ended or is unknown, API-23): reserve again. Never set by Reserve.
	Gone bool
}

// Reserve asks POST /v1/reservations (API-03, API-17, API-18): 201 with a
// grant, or 202 with a ticket when queued. A req without queue waits up to
// req.WaitSecs (at least 5) on the hub; the deadline is extended to match.
// req.RequestID must be set (see client.NewRequestID) and kept for
// retries (API-44).
func (c *Client) Reserve(ctx context.Context, req client.ReservationRequest) (Reserved, error) {
	wait := 0
	if !req.Queue {
		wait = max(req.WaitSecs, client.MinQueuelessWaitSecs)
	}
	a, err := c.do(ctx, http.MethodPost, "/v1/reservations", nil, req, secs(wait))
	if err != nil {
		return Reserved{}, err
	}
	return a.reserved("reserve", false)
}

// PollTicket asks GET /v1/reservations/tickets/<ticket>?wait=<secs>
// (API-04, API-22, API-23): 201 grant, 202 still waiting (Ticket set), 410
// reservation_gone as Gone with a nil error. wait is rounded up to whole
// seconds and capped at 60.
func (c *Client) PollTicket(ctx context.Context, ticket string, wait time.Duration) (Reserved, error) {
	a, err := c.do(ctx, http.MethodGet, "/v1/reservations/tickets/"+seg(ticket), waitQuery(wait), nil, secs(waitSecs(wait)))
	if err != nil {
		return Reserved{}, err
	}
	return a.reserved("poll ticket", true)
}

func (a *answer) reserved(what string, gone bool) (Reserved, error) {
	switch a.status {
	case http.StatusCreated:
		var g client.ReservationGrant
		if err := a.decode(what, &g); err != nil {
			return Reserved{}, err
		}
		return Reserved{Grant: &g}, nil
	case http.StatusAccepted:
		var t client.ReservationTicket
		if err := a.decode(what, &t); err != nil {
			return Reserved{}, err
		}
		if t.Ticket == "" {
			return Reserved{}, fmt.Errorf("%w: %s: 202 without a ticket", ErrProtocol, what)
		}
		return Reserved{Ticket: t.Ticket}, nil
	}
	err := a.expect(what)
	var se *client.StatusError
	if gone && errors.As(err, &se) && se.Status == http.StatusGone && se.Body.Code == client.CodeReservationGone {
		return Reserved{Gone: true}, nil
	}
	return Reserved{}, err
}

// CancelTicket asks DELETE /v1/reservations/tickets/<ticket> (API-04,
// API-24): 204, also for an unknown ticket; 409 conflict once claimed.
func (c *Client) CancelTicket(ctx context.Context, ticket string) error {
	return c.noContent(ctx, "cancel ticket", http.MethodDelete, "/v1/reservations/tickets/"+seg(ticket), nil)
}

// Claim asks POST /v1/reservations/<id>/claim (API-05, API-26): 204, again
// 204 when repeated; 410 reservation_gone when the grant is gone.
func (c *Client) Claim(ctx context.Context, id string) error {
	return c.noContent(ctx, "claim", http.MethodPost, "/v1/reservations/"+seg(id)+"/claim", nil)
}

// Outcome asks POST /v1/reservations/<admission>/outcome (API-05,
// API-27, API-28): 204, also for a repeat of the same outcome.
func (c *Client) Outcome(ctx context.Context, admission string, o client.Outcome) error {
	return c.noContent(ctx, "outcome", http.MethodPost, "/v1/reservations/"+seg(admission)+"/outcome",
		client.OutcomeRequest{Admission: admission, Outcome: o})
}

// OutcomeNext asks POST /v1/reservations/<admission>/outcome with next,
// the runner's next reservation request (a hub of relay session version
// 4 or newer): the outcome is taken and next queued by the same answer,
// 201 with its grant or 202 with its ticket. A Reserved with neither
// (204) means the outcome was taken and next was not: send next with
// Reserve, under the same request_id, which answers why. An error means
// the outcome was not taken, nor next queued. next.RequestID must be set
// and kept for retries, as for Reserve.
func (c *Client) OutcomeNext(ctx context.Context, admission string, o client.Outcome, next client.ReservationRequest) (Reserved, error) {
	a, err := c.do(ctx, http.MethodPost, "/v1/reservations/"+seg(admission)+"/outcome", nil,
		client.OutcomeRequest{Admission: admission, Outcome: o, Next: &next}, 0)
	if err != nil {
		return Reserved{}, err
	}
	if a.status == http.StatusNoContent {
		return Reserved{}, nil
	}
	return a.reserved("outcome", false)
}

// Renew asks POST /v1/reservations/<id>/renew (API-06, API-29): 200 with
// the grant and the lease the node granted; 410 reservation_gone when
// lapsed, released or lost. leaseSecs 0 asks for the hub's default.
func (c *Client) Renew(ctx context.Context, id string, leaseSecs int) (client.ReservationGrant, error) {
	var g client.ReservationGrant
	a, err := c.do(ctx, http.MethodPost, "/v1/reservations/"+seg(id)+"/renew", nil, client.RenewRequest{LeaseSecs: leaseSecs}, 0)
	if err != nil {
		return g, err
	}
	if err := a.expect("renew", http.StatusOK); err != nil {
		return g, err
	}
	return g, a.decode("renew", &g)
}

// Release asks DELETE /v1/reservations/<id> (API-06, API-30): 204, even
// when the reservation is already gone.
func (c *Client) Release(ctx context.Context, id string) error {
	return c.noContent(ctx, "release", http.MethodDelete, "/v1/reservations/"+seg(id), nil)
}

// SubmitJob asks POST /v1/jobs (API-07, API-31..35, API-43): 201 JobView.
// sub.RequestID must be set and kept for retries; a retry after the job
// left the hub's history answers 410 not_found (not retryable).
func (c *Client) SubmitJob(ctx context.Context, sub client.JobSubmission) (client.JobView, error) {
	return c.jobView(ctx, "submit job", http.MethodPost, "/v1/jobs", nil, sub, 0, http.StatusCreated)
}

// GetJob asks GET /v1/jobs/<id>?after=<revision>&wait=<secs> (API-07,
// API-11): 200 JobView, held by the hub until its revision passes after or
// wait ends. after 0 and wait 0 answer at once.
func (c *Client) GetJob(ctx context.Context, id string, after uint64, wait time.Duration) (client.JobView, error) {
	q := waitQuery(wait)
	if after > 0 {
		q.Set("after", strconv.FormatUint(after, 10))
	}
	return c.jobView(ctx, "get job", http.MethodGet, "/v1/jobs/"+seg(id), q, nil, secs(waitSecs(wait)), http.StatusOK)
}

// Cancel asks POST /v1/jobs/<id>/cancel (API-08, API-40): 202 JobView.
// Use [Retrier.DoUntilAccepted] around it (RELAY-14).
func (c *Client) Cancel(ctx context.Context, id string, mode client.CancelMode) (client.JobView, error) {
	return c.jobView(ctx, "cancel job", http.MethodPost, "/v1/jobs/"+seg(id)+"/cancel", nil,
		client.CancelRequest{Mode: mode}, 0, http.StatusAccepted)
}

// Settle asks POST /v1/jobs/<id>/settle (API-08, API-41): 204; 409
// conflict while the job has not finished. Use [Retrier.DoUntilAccepted]
// around it (RELAY-14, RELAY-16).
func (c *Client) Settle(ctx context.Context, id string) error {
	return c.noContent(ctx, "settle job", http.MethodPost, "/v1/jobs/"+seg(id)+"/settle", nil)
}

// Hello asks POST /v1/clients (API-09): 204 for API-key clients; a relay
// is refused (403).
func (c *Client) Hello(ctx context.Context, h client.ClientHello) error {
	return c.noContent(ctx, "client hello", http.MethodPost, "/v1/clients", h)
}

// Output is one output read (API-37).
type Output struct {
	// Data is the bytes read, at most 1 MiB, starting at Offset.
	Data []byte
	// Offset is the offset of Data's first byte (vk-output-offset).
	Offset int64
	// Length is the job's output length so far (vk-output-length).
	Length int64
	// Complete is true only once the job ended and Data reaches the end of
	// its output (vk-output-complete).
	Complete bool
}

// ReadOutput asks GET /v1/jobs/<id>/output?offset=<n>&wait=<secs>
// (API-08, API-37, API-38): 200 with the raw bytes and the three
// vk-output-* headers. An offset past the current end (416) returns an
// Output with only Length set and an error wrapping [ErrPastEnd].
func (c *Client) ReadOutput(ctx context.Context, id string, offset int64, wait time.Duration) (Output, error) {
	q := waitQuery(wait, "offset", strconv.FormatInt(offset, 10))
	a, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+seg(id)+"/output", q, nil, secs(waitSecs(wait)))
	if err != nil {
		return Output{}, err
	}
	if a.status == http.StatusRequestedRangeNotSatisfiable {
		n, herr := int64Header(a.header, client.HeaderOutputLength)
		if herr != nil {
			return Output{}, fmt.Errorf("%w: read output: 416: %v", ErrProtocol, herr)
		}
		return Output{Length: n}, fmt.Errorf("hubclient: read output of %s at %d: %w (length %d): %w",
			id, offset, ErrPastEnd, n, DecodeError(a.status, a.header, a.body))
	}
	if err := a.expect("read output", http.StatusOK); err != nil {
		return Output{}, err
	}
	out := Output{Data: a.body}
	if out.Offset, err = int64Header(a.header, client.HeaderOutputOffset); err != nil {
		return Output{}, fmt.Errorf("%w: read output: %v", ErrProtocol, err)
	}
	if out.Length, err = int64Header(a.header, client.HeaderOutputLength); err != nil {
		return Output{}, fmt.Errorf("%w: read output: %v", ErrProtocol, err)
	}
	switch v := a.header.Get(client.HeaderOutputComplete); v {
	case "true":
		out.Complete = true
	case "false", "":
	default:
		return Output{}, fmt.Errorf("%w: read output: %s %q", ErrProtocol, client.HeaderOutputComplete, v)
	}
	if out.Offset+int64(len(out.Data)) > out.Length {
		return Output{}, fmt.Errorf("%w: read output: %d bytes at %d pass length %d", ErrProtocol, len(out.Data), out.Offset, out.Length)
	}
	return out, nil
}

func int64Header(h http.Header, name string) (int64, error) {
	v := h.Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("header %s %q is not a non-negative integer", name, v)
	}
	return n, nil
}

func (c *Client) noContent(ctx context.Context, what, method, path string, in any) error {
	a, err := c.do(ctx, method, path, nil, in, 0)
	if err != nil {
		return err
	}
	return a.expect(what, http.StatusNoContent)
}

func (c *Client) jobView(ctx context.Context, what, method, path string, q map[string][]string, in any, wait time.Duration, ok int) (client.JobView, error) {
	var v client.JobView
	a, err := c.do(ctx, method, path, q, in, wait)
	if err != nil {
		return v, err
	}
	if err := a.expect(what, ok); err != nil {
		return v, err
	}
	if err := a.decode(what, &v); err != nil {
		return v, err
	}
	return v, nil
}

func secs(n int) time.Duration { return time.Duration(max(n, 0)) * time.Second }
