package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/job"
)

// capacity serves POST /v1/capacity (API-02, API-13, API-14): 200 Capacity,
// long-polled while the revision has not passed After (≤ 60 s). Read-only:
// no request_id.
func (a *API) capacity(w http.ResponseWriter, r *http.Request, p Principal, body []byte) error {
	var req client.CapacityRequest
	if err := decode(body, &req, false); err != nil {
		return err
	}
	if err := req.Placement.Validate(); err != nil {
		return &Error{Code: client.CodeInvalid, Msg: err.Error()}
	}
	c, err := a.cfg.Backend.Capacity(r.Context(), p, req, capWait(req.WaitSecs))
	return answer(w, http.StatusOK, c, err)
}

// reserve serves POST /v1/reservations (API-03, API-16..21): 201 grant or
// 202 ticket with queue=true; with queue=false a wait of at least 5 s, then
// 503 no_capacity. Idempotent by request_id (API-42, API-44): a retry with
// the same body answers the existing ticket's current state (its grant
// once granted), with another body 409 conflict.
func (a *API) reserve(w http.ResponseWriter, r *http.Request, p Principal, body []byte) error {
	var req client.ReservationRequest
	if err := decode(body, &req, false); err != nil {
		return err
	}
	if err := checkReservation(req); err != nil {
		return err
	}
	return a.reserveOnce(r.Context(), w, p, req, store.Sum(body))
}

// checkReservation checks a reservation request's fields beyond its
// JSON: a POST /v1/reservations body or an outcome's next.
func checkReservation(req client.ReservationRequest) error {
	if err := client.ValidateRequestID(req.RequestID); err != nil {
		return &Error{Code: client.CodeInvalid, Msg: err.Error()}
	}
	if err := req.Placement.Validate(); err != nil {
		return &Error{Code: client.CodeInvalid, Msg: err.Error()}
	}
	if req.Runner == "" {
		return Errorf(client.CodeInvalid, "a relay's reservation request must name its runner") // API-19
	}
	if req.LeaseSecs < 0 || req.WaitSecs < 0 {
		return Errorf(client.CodeInvalid, "lease_secs and wait_secs must not be negative")
	}
	return nil
}

// reserveOnce makes the reservation req asks for, once per request_id:
// sum is the SHA-256 of req's JSON as sent, which a retry must repeat
// (API-42, API-44). It writes 201 or 202, or returns the error.
func (a *API) reserveOnce(ctx context.Context, w http.ResponseWriter, p Principal, req client.ReservationRequest, sum store.Hash) error {
	if ans, err := a.cfg.Store.GetAnswer(ctx, p.ID, req.RequestID, a.clk.Now()); err == nil {
		if ans.BodyHash != sum {
			return Errorf(client.CodeConflict, "request_id %s was used with another body", req.RequestID)
		}
		var t client.ReservationTicket
		if err := json.Unmarshal(ans.Body, &t); err != nil || t.Ticket == "" {
			return &Error{Code: client.CodeInternal, Msg: "stored answer unreadable", Err: err}
		}
		g, err := a.cfg.Backend.Ticket(ctx, p, t.Ticket, 0) // API-44
		if err != nil {
			return err
		}
		writeGrant(w, g, t)
		return nil
	} else if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrExpired) {
		return err
	}
	wait := capWait(max(req.WaitSecs, client.MinQueuelessWaitSecs)) // API-18
	g, ticket, err := a.cfg.Backend.Reserve(ctx, p, req, wait)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(client.ReservationTicket{Ticket: ticket})
	status := http.StatusAccepted
	if g != nil {
		status = http.StatusCreated
	}
	a.putAnswer(ctx, store.Answer{Principal: p.ID, RequestID: req.RequestID, BodyHash: sum, Status: status, Body: b, Created: a.clk.Now()})
	writeGrant(w, g, client.ReservationTicket{Ticket: ticket})
	return nil
}

// putAnswer records a create's first answer; a concurrent duplicate that
// recorded first wins (logged).
func (a *API) putAnswer(ctx context.Context, ans store.Answer) {
	if err := a.cfg.Store.PutAnswer(context.WithoutCancel(ctx), ans); err != nil {
		a.log.Warn("request_id answer not recorded", logkey.RequestID, ans.RequestID, logkey.Err, err)
	}
}

// ticketGet serves GET /v1/reservations/tickets/{ticket}?wait= (API-04,
// API-22, API-23): 202 ticket while waiting, 201 grant, 410 once ended or
// unknown, 404 for another principal's. Read-only.
func (a *API) ticketGet(w http.ResponseWriter, r *http.Request, p Principal, _ []byte) error {
	wait, err := waitParam(r)
	if err != nil {
		return err
	}
	t := r.PathValue("ticket")
	g, err := a.cfg.Backend.Ticket(r.Context(), p, t, wait)
	if err != nil {
		return err
	}
	writeGrant(w, g, client.ReservationTicket{Ticket: t})
	return nil
}

// ticketDelete serves DELETE /v1/reservations/tickets/{ticket} (API-24):
// 204 (also for an unknown ticket), 409 once claimed, 404 another's.
// Idempotent by construction.
func (a *API) ticketDelete(w http.ResponseWriter, r *http.Request, p Principal, _ []byte) error {
	return noContent(w, a.cfg.Backend.CancelTicket(r.Context(), p, r.PathValue("ticket")))
}

// claim serves POST /v1/reservations/{id}/claim (API-05, API-26): 204,
// again 204 when repeated, 410 for no such grant (DECISIONS 1).
// Idempotent by construction.
func (a *API) claim(w http.ResponseWriter, r *http.Request, p Principal, _ []byte) error {
	return noContent(w, a.cfg.Backend.Claim(r.Context(), p, r.PathValue("id")))
}

// outcome serves POST /v1/reservations/{admission}/outcome (API-05,
// API-27, API-28): 204 (also for a repeat of the same outcome), 400 when
// the body names another admission, 404 unknown, 409 per state.
//
// A body with next asks, once the outcome is taken, for the runner's next
// reservation as POST /v1/reservations would, under next's own
// request_id: 201 grant or 202 ticket. The outcome comes first and alone
// decides the error: a refused outcome makes no reservation, and a
// reservation that fails after the outcome was taken is answered 204
// (logged), so the relay knows its outcome landed and sends next as a
// POST of its own, which answers the reservation's error. next is hashed
// as its JSON stood in the body, which is what that POST's body is.
func (a *API) outcome(w http.ResponseWriter, r *http.Request, p Principal, body []byte) error {
	var req client.OutcomeRequest
	if err := decode(body, &req, false); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return &Error{Code: client.CodeInvalid, Msg: err.Error()}
	}
	if adm := r.PathValue("admission"); req.Admission != adm {
		return Errorf(client.CodeInvalid, "body names admission %q, path %q", req.Admission, adm)
	}
	if req.Next != nil {
		if err := checkReservation(*req.Next); err != nil {
			return err
		}
	}
	ctx := r.Context()
	if err := a.cfg.Backend.Outcome(ctx, p, req.Admission, req.Outcome); err != nil || req.Next == nil {
		return noContent(w, err)
	}
	var raw struct {
		Next json.RawMessage `json:"next"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return &Error{Code: client.CodeInternal, Msg: "outcome body unreadable a second time", Err: err}
	}
	// reserveOnce writes its answer or returns an error having written
	// nothing.
	if err := a.reserveOnce(ctx, w, p, *req.Next, store.Sum(raw.Next)); err != nil {
		a.log.Info("outcome taken; its next reservation failed and is left to the relay's own request",
			logkey.Admission, req.Admission, logkey.RequestID, req.Next.RequestID, logkey.Err, err)
		w.WriteHeader(http.StatusNoContent)
	}
	return nil
}

// renew serves POST /v1/reservations/{id}/renew (API-06, API-29): 200
// grant with the lease the node granted; 410 once lapsed, released or its
// node lost. Idempotent by construction.
func (a *API) renew(w http.ResponseWriter, r *http.Request, p Principal, body []byte) error {
	var req client.RenewRequest
	if err := decode(body, &req, true); err != nil {
		return err
	}
	if req.LeaseSecs < 0 {
		return Errorf(client.CodeInvalid, "lease_secs must not be negative")
	}
	g, err := a.cfg.Backend.Renew(r.Context(), p, r.PathValue("id"), req.LeaseSecs)
	return answer(w, http.StatusOK, g, err)
}

// release serves DELETE /v1/reservations/{id} (API-06, API-30): 204 even
// when already gone. Idempotent by construction.
func (a *API) release(w http.ResponseWriter, r *http.Request, p Principal, _ []byte) error {
	return noContent(w, a.cfg.Backend.Release(r.Context(), p, r.PathValue("id")))
}

// submit serves POST /v1/jobs (API-07, API-31..35): 201 JobView.
// Idempotent by request_id (API-42, API-43): a retry with the same body
// replays the first answer — refusals included, so an approval refusal
// counts once (FAIL-23) — or 410 not_found once the job left the hub's
// history; with another body 409 conflict. Retryable answers (5xx) are not
// recorded. A new job's answer is stored in its job record's own write
// (Backend.Submit): one durable commit before the 201, and no moment at
// which the job is stored and its answer is not, when a retry would find
// no answer.
func (a *API) submit(w http.ResponseWriter, r *http.Request, p Principal, body []byte) error {
	var sub client.JobSubmission
	if err := decode(body, &sub, false); err != nil {
		return err
	}
	if err := client.ValidateRequestID(sub.RequestID); err != nil {
		return &Error{Code: client.CodeInvalid, Msg: err.Error()}
	}
	ctx := r.Context()
	sum := store.Sum(body)
	ans, err := a.cfg.Store.GetAnswer(ctx, p.ID, sub.RequestID, a.clk.Now())
	switch {
	case err == nil || errors.Is(err, store.ErrExpired) && ans.Dropped:
		if ans.BodyHash != sum {
			return Errorf(client.CodeConflict, "request_id %s was used with another body", sub.RequestID)
		}
		if err != nil {
			return &Error{Status: http.StatusGone, Code: client.CodeNotFound, Msg: "the job of this request_id left the hub's history"}
		}
		replay(w, ans)
		return nil
	case err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrExpired):
		return err
	}
	rec := store.Answer{Principal: p.ID, RequestID: sub.RequestID, BodyHash: sum, Created: a.clk.Now()}
	view, recorded, err := a.submitChecked(ctx, p, sub, rec)
	if err != nil {
		var ae *Error
		if errors.As(err, &ae) && ae.status() >= 400 && ae.status() < 500 {
			b, _ := json.Marshal(errorBody(ae))
			rec.Status, rec.Body = ae.status(), append(b, '\n')
			a.putAnswer(ctx, rec)
		}
		return err
	}
	if recorded == nil {
		// The job an earlier submission made, whose answer was never
		// stored (see the driver's sameSubmission): store it now.
		b, _ := json.Marshal(view)
		rec.Status, rec.Body, rec.Job = http.StatusCreated, append(b, '\n'), view.ID
		a.putAnswer(ctx, rec)
		recorded = &rec
	}
	// The answer stored is the answer sent, byte for byte: a retry
	// replays exactly what the first try was told.
	replay(w, *recorded)
	return nil
}

// replay writes a stored answer.
func replay(w http.ResponseWriter, ans store.Answer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(ans.Body)))
	w.WriteHeader(ans.Status)
	w.Write(ans.Body)
}

// submitChecked validates the spec (400 invalid, 413 too_large) and
// submits, the job recorded with its answer ans.
func (a *API) submitChecked(ctx context.Context, p Principal, sub client.JobSubmission, ans store.Answer) (client.JobView, *store.Answer, error) {
	refuse := func(e *Error) (client.JobView, *store.Answer, error) {
		return client.JobView{}, nil, a.refuseJob(ctx, p, sub, e)
	}
	if err := sub.Spec.CheckSize(); err != nil {
		return refuse(&Error{Code: client.CodeTooLarge, Msg: err.Error()})
	}
	if err := sub.Placement.Validate(); err != nil {
		return refuse(&Error{Code: client.CodeInvalid, Msg: err.Error()})
	}
	if err := sub.Spec.Validate(); err != nil {
		msg := err.Error()
		if errors.Is(err, job.ErrUnknownKind) {
			msg = "unknown job spec kind: " + msg
		}
		return refuse(&Error{Code: client.CodeInvalid, Msg: msg})
	}
	if sub.PlaceWithinSecs < 0 {
		return refuse(Errorf(client.CodeInvalid, "place_within_secs must not be negative"))
	}
	return a.cfg.Backend.Submit(ctx, p, sub, ans)
}

// refuseJob ends the submission's admission as empty before answering a
// 4xx (API-34); the backend does the same for its own refusals.
func (a *API) refuseJob(ctx context.Context, p Principal, sub client.JobSubmission, e *Error) error {
	if sub.Admission != "" {
		a.cfg.Backend.EndAdmission(ctx, p, sub.Admission)
	}
	return e
}

// jobGet serves GET /v1/jobs/{id}?after=&wait= (API-07, API-11, API-36):
// 200 JobView, long-polled until its revision passes after. Read-only.
func (a *API) jobGet(w http.ResponseWriter, r *http.Request, p Principal, _ []byte) error {
	wait, err := waitParam(r)
	if err != nil {
		return err
	}
	after, err := uintParam(r, "after")
	if err != nil {
		return err
	}
	v, err := a.cfg.Backend.Job(r.Context(), p, r.PathValue("id"), after, wait)
	return answer(w, http.StatusOK, v, err)
}

// outputGet serves GET /v1/jobs/{id}/output?offset=&wait= (API-08,
// API-37..39): 200 with up to 1 MiB of raw bytes from offset and the
// vk-output-* headers; 416 with vk-output-length past the end; long-polled
// until bytes past offset exist or the output is complete. Read-only.
func (a *API) outputGet(w http.ResponseWriter, r *http.Request, p Principal, _ []byte) error {
	wait, err := waitParam(r)
	if err != nil {
		return err
	}
	off, err := uintParam(r, "offset")
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	ctx := r.Context()
	if err := a.cfg.Backend.OutputReadable(ctx, p, id); err != nil {
		return err
	}
	c, err := a.cfg.Output.ReadAt(ctx, id, int64(off), output.MaxRead)
	if err == nil && len(c.Data) == 0 && !c.Complete && wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		werr := a.cfg.Output.Wait(wctx, id, int64(off))
		cancel()
		if werr != nil && ctx.Err() != nil {
			return werr
		}
		c, err = a.cfg.Output.ReadAt(ctx, id, int64(off), output.MaxRead)
	}
	if errors.Is(err, output.ErrOffset) {
		n, _, _ := a.cfg.Output.Len(ctx, id)
		h := http.Header{}
		h.Set(client.HeaderOutputLength, strconv.FormatInt(n, 10))
		return &Error{Status: http.StatusRequestedRangeNotSatisfiable, Code: client.CodeInvalid,
			Msg: "offset past the end of the output", Header: h}
	}
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set(client.HeaderOutputOffset, strconv.FormatInt(c.Offset, 10))
	h.Set(client.HeaderOutputLength, strconv.FormatInt(c.Length, 10))
	h.Set(client.HeaderOutputComplete, strconv.FormatBool(c.Complete))
	h.Set("Content-Length", strconv.Itoa(len(c.Data)))
	w.WriteHeader(http.StatusOK)
	w.Write(c.Data)
	return nil
}

// cancel serves POST /v1/jobs/{id}/cancel (API-08, API-40): 202 JobView;
// a later immediate overrides graceful; a finished job is unchanged.
// Idempotent by construction.
func (a *API) cancel(w http.ResponseWriter, r *http.Request, p Principal, body []byte) error {
	var req client.CancelRequest
	if err := decode(body, &req, false); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return &Error{Code: client.CodeInvalid, Msg: err.Error()}
	}
	v, err := a.cfg.Backend.Cancel(r.Context(), p, r.PathValue("id"), req.Mode)
	return answer(w, http.StatusAccepted, v, err)
}

// settle serves POST /v1/jobs/{id}/settle (API-08, API-41): 204; 409
// (retried) until the job finished; drops the output, keeps the record.
// Idempotent by construction.
func (a *API) settle(w http.ResponseWriter, r *http.Request, p Principal, _ []byte) error {
	return noContent(w, a.cfg.Backend.Settle(r.Context(), p, r.PathValue("id")))
}

// clients serves POST /v1/clients (API-09): 204 for API-key clients,
// refused (403) to a relay. API keys are not built yet, so every caller
// that authenticates is a relay and is refused.
func (a *API) clients(w http.ResponseWriter, r *http.Request, p Principal, body []byte) error {
	var hello client.ClientHello
	if err := decode(body, &hello, false); err != nil {
		return err
	}
	if p.Kind == store.KindRelay {
		return Errorf(client.CodeForbidden, "POST /v1/clients is for API-key clients, not relays")
	}
	if hello.Name == "" {
		return Errorf(client.CodeInvalid, "client hello without a name")
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// noContent answers 204 unless err, which it returns for the error writer.
func noContent(w http.ResponseWriter, err error) error {
	if err == nil {
		w.WriteHeader(http.StatusNoContent)
	}
	return err
}

// answer answers status with v as JSON unless err, which it returns.
func answer[T any](w http.ResponseWriter, status int, v T, err error) error {
	if err == nil {
		WriteJSON(w, status, v)
	}
	return err
}

// writeGrant answers 201 with the grant g, or while there is none 202
// with the ticket t.
func writeGrant(w http.ResponseWriter, g *client.ReservationGrant, t client.ReservationTicket) {
	if g != nil {
		WriteJSON(w, http.StatusCreated, g)
	} else {
		WriteJSON(w, http.StatusAccepted, t)
	}
}
