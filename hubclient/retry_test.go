package hubclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/proto/client"
	"pgregory.net/rapid"
)

func answerErr(status int, code client.Code, retryAfter int) error {
	return fmt.Errorf("hubclient: x: %w", &client.StatusError{Status: status, Body: client.Error{Error: "x", Code: code, RetryAfterSecs: retryAfter}})
}

var errTransport = fmt.Errorf("hubclient: POST /v1/x: %w", syscall.ECONNREFUSED)

// Which failures each retry rule repeats.
//
// spec: RELAY-13, RELAY-14, RELAY-16
func TestRetryClassification(t *testing.T) {
	tests := []struct {
		name          string
		err           error
		relay13       bool // Retrier.Do repeats it
		untilAccepted bool // Retrier.DoUntilAccepted repeats it
	}{
		{"transport", errTransport, true, true},
		{"eof", fmt.Errorf("x: %w", io.ErrUnexpectedEOF), true, true},
		{"500 internal", answerErr(500, client.CodeInternal, 0), true, true},
		{"503 unavailable", answerErr(503, client.CodeUnavailable, 2), true, true},
		{"503 no_capacity", answerErr(503, client.CodeNoCapacity, 9), true, true},
		{"502 unknown code", answerErr(502, client.CodeOther, 0), true, true},
		{"400 invalid", answerErr(400, client.CodeInvalid, 0), false, false},
		{"401 unauthorized", answerErr(401, client.CodeUnauthorized, 0), false, true},
		{"403 forbidden", answerErr(403, client.CodeForbidden, 0), false, true},
		{"403 approval_pending", answerErr(403, client.CodeApprovalPending, 0), false, true},
		{"404 not_found", answerErr(404, client.CodeNotFound, 0), false, false},
		{"409 conflict", answerErr(409, client.CodeConflict, 0), false, true},
		{"410 reservation_gone", answerErr(410, client.CodeReservationGone, 0), false, true},
		{"410 not_found", answerErr(410, client.CodeNotFound, 0), false, true},
		{"413 too_large", answerErr(413, client.CodeTooLarge, 0), false, true},
		{"4xx unknown code", answerErr(418, client.CodeOther, 0), false, true},
		{"protocol", fmt.Errorf("%w: status 200", ErrProtocol), false, true},
		{"config", fmt.Errorf("%w: no key", ErrConfig), false, false},
		{"canceled", context.Canceled, false, true},
	}
	for _, tt := range tests {
		if got := Retryable(tt.err); got != tt.relay13 {
			t.Errorf("Retryable(%s) = %t, want %t", tt.name, got, tt.relay13)
		}
		if got := retryUntilAccepted(tt.err); got != tt.untilAccepted {
			t.Errorf("retryUntilAccepted(%s) = %t, want %t", tt.name, got, tt.untilAccepted)
		}
	}
}

// script returns an op that fails with errs in turn, then succeeds, and
// records when (in the bubble's time) each attempt ran.
func script(errs []error, at *[]time.Duration, start time.Time) func(context.Context) error {
	i := 0
	return func(context.Context) error {
		*at = append(*at, time.Since(start))
		if i < len(errs) {
			i++
			return errs[i-1]
		}
		return nil
	}
}

// Do backs off 1, 2, 4, … up to 30 s plus jitter, waits at least what
// retry_after_secs says, and stops at the first non-retryable 4xx.
//
// spec: RELAY-13
func TestDoBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &Retrier{Rand: rand.New(rand.NewPCG(1, 2))}
		start := time.Now()
		var at []time.Duration
		errs := []error{errTransport, errTransport, answerErr(500, client.CodeInternal, 0), errTransport, errTransport,
			errTransport, errTransport, answerErr(503, client.CodeUnavailable, 45), errTransport}
		if err := r.Do(t.Context(), "test", script(errs, &at, start)); err != nil {
			t.Fatalf("Do = %v, want success after %d failures", err, len(errs))
		}
		if len(at) != len(errs)+1 {
			t.Fatalf("%d attempts, want %d", len(at), len(errs)+1)
		}
		bases := []time.Duration{1, 2, 4, 8, 16, 30, 30, 45, 30}
		for i := 1; i < len(at); i++ {
			gap, base := at[i]-at[i-1], bases[i-1]*time.Second
			hi := base + base/2
			if i == 8 { // retry_after 45 s: honoured, jitter < 10 %
				hi = base + base/10
			}
			if gap < base || gap >= hi {
				t.Errorf("wait before attempt %d = %v, want in [%v, %v)", i+1, gap, base, hi)
			}
		}
	})
}

// Unavailable answers that name their wait (a standby without a leader,
// a new leader without the relay's session) are retried after that wait
// and leave the backoff where it was, for MaxPaced answers in a row; a
// transport error among them goes on from the backoff's own step, and
// once the pacing is used up the backoff grows again.
//
// spec: RELAY-13
func TestDoPacedByUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &Retrier{Rand: rand.New(rand.NewPCG(3, 4))}
		start := time.Now()
		var at []time.Duration
		unavailable := answerErr(503, client.CodeUnavailable, 1)
		errs := []error{errTransport, unavailable, unavailable, unavailable, errTransport, unavailable}
		for range MaxPaced - 4 {
			errs = append(errs, unavailable)
		}
		errs = append(errs, unavailable, unavailable) // past MaxPaced: the backoff grows
		if err := r.Do(t.Context(), "test", script(errs, &at, start)); err != nil {
			t.Fatalf("Do = %v", err)
		}
		bases := []time.Duration{1, 1, 1, 1, 2, 1}
		for range MaxPaced - 4 {
			bases = append(bases, 1)
		}
		bases = append(bases, 4, 8)
		for i := 1; i < len(at); i++ {
			gap, base := at[i]-at[i-1], bases[i-1]*time.Second
			if gap < base || gap >= base+base/2 {
				t.Errorf("wait before attempt %d = %v, want in [%v, %v)", i+1, gap, base, base+base/2)
			}
		}
	})
}

// spec: RELAY-13
func TestDoStops(t *testing.T) {
	tests := []struct {
		name     string
		errs     []error
		attempts int
		wantCode client.Code
	}{
		{"400 at once", []error{answerErr(400, client.CodeInvalid, 0)}, 1, client.CodeInvalid},
		{"409 not retried", []error{errTransport, answerErr(409, client.CodeConflict, 0)}, 2, client.CodeConflict},
		{"approval pending never retried", []error{answerErr(403, client.CodeApprovalPending, 0)}, 1, client.CodeApprovalPending},
		{"410 not_found not retried", []error{answerErr(503, client.CodeUnavailable, 1), answerErr(410, client.CodeNotFound, 0)}, 2, client.CodeNotFound},
	}
	for _, tt := range tests {
		synctest.Test(t, func(t *testing.T) {
			var at []time.Duration
			err := (&Retrier{}).Do(t.Context(), "test", script(append(tt.errs, errors.New("must not get here")), &at, time.Now()))
			if _, code := statusOf(err); code != tt.wantCode || len(at) != tt.attempts {
				t.Errorf("%s: Do = %v after %d attempts, want code %s after %d", tt.name, err, len(at), tt.wantCode, tt.attempts)
			}
		})
	}
}

// The context bounds the loop; MaxAttempts bounds it too.
//
// spec: RELAY-13
func TestDoContextAndAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Second)
		defer cancel()
		var at []time.Duration
		errs := make([]error, 1000)
		for i := range errs {
			errs[i] = errTransport
		}
		err := (&Retrier{}).Do(ctx, "test", script(errs, &at, time.Now()))
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("Do past its deadline = %v, want the last error and DeadlineExceeded", err)
		}
		if len(at) < 5 || len(at) > 8 {
			t.Errorf("%d attempts in 100 s, want 5..8", len(at))
		}
		at = nil
		err = (&Retrier{MaxAttempts: 3}).Do(t.Context(), "test", script(errs, &at, time.Now()))
		if len(at) != 3 || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("MaxAttempts 3: %d attempts, err %v", len(at), err)
		}
	})
}

// Cancel and settle are retried after any failure, a refused relay and
// 409 included, until accepted or answered 400 or 404.
//
// spec: RELAY-14, RELAY-16
func TestDoUntilAccepted(t *testing.T) {
	tests := []struct {
		name     string
		errs     []error
		attempts int
		wantErr  bool
	}{
		{"settle 409 until the job ends", []error{answerErr(409, client.CodeConflict, 0), answerErr(409, client.CodeConflict, 0),
			answerErr(409, client.CodeConflict, 0)}, 4, false},
		{"refused relay, hub down, then accepted", []error{answerErr(401, client.CodeUnauthorized, 0), errTransport,
			answerErr(403, client.CodeForbidden, 0), answerErr(503, client.CodeUnavailable, 5)}, 5, false},
		{"404 ends it", []error{errTransport, answerErr(404, client.CodeNotFound, 0)}, 2, true},
		{"400 ends it", []error{answerErr(400, client.CodeInvalid, 0)}, 1, true},
	}
	for _, tt := range tests {
		synctest.Test(t, func(t *testing.T) {
			var at []time.Duration
			err := (&Retrier{}).DoUntilAccepted(t.Context(), "settle", script(tt.errs, &at, time.Now()))
			if (err != nil) != tt.wantErr || len(at) != tt.attempts {
				t.Errorf("%s: DoUntilAccepted = %v after %d attempts, want error=%t after %d", tt.name, err, len(at), tt.wantErr, tt.attempts)
			}
		})
	}
}

// Delay stays within its documented bounds for any attempt and hint.
//
// spec: RELAY-13
func TestDelayBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := &Retrier{Rand: rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "s1"), 2))}
		attempt := rapid.IntRange(0, 200).Draw(t, "attempt")
		ra := time.Duration(rapid.IntRange(0, 3600).Draw(t, "retry_after")) * time.Second
		d := r.Delay(attempt, ra)
		b := min(MinBackoff<<min(attempt, 10), MaxBackoff)
		if ra = min(ra, MaxRetryAfter); ra > b {
			if d < ra || d >= ra+ra/10+1 {
				t.Fatalf("Delay(%d, %v) = %v, want in [%v, +10%%)", attempt, ra, d, ra)
			}
			return
		}
		if d < b || d >= b+b/2 || d < MinBackoff || d >= MaxBackoff*3/2 {
			t.Fatalf("Delay(%d, %v) = %v, want in [%v, %v)", attempt, ra, d, b, b+b/2)
		}
	})
}

// Over real TLS: a settle answered 409 twice is repeated, each attempt
// signed afresh (on the kept connection: three signatures, one
// connection), until accepted; a reservation answered
// 503 with retry_after_secs waits that long.
//
// spec: RELAY-13, RELAY-16, AUTH-14
func TestRetryOverTLS(t *testing.T) {
	h := newFakeHub(t)
	clk := &instantClock{}
	c := h.client(t, clk)
	conflict := reply{status: http.StatusConflict, body: `{"error":"job running","code":"conflict"}`}
	h.answer(client.RouteSettle, conflict, conflict, reply{status: http.StatusNoContent})
	before := h.connCount()
	err := c.Retrier().DoUntilAccepted(t.Context(), "settle", func(ctx context.Context) error { return c.Settle(ctx, "job1") })
	if err != nil {
		t.Fatalf("settle = %v", err)
	}
	if n := h.connCount() - before; n != 1 {
		t.Errorf("3 settle attempts used %d connections, want the kept one", n)
	}
	sigs := map[string]bool{}
	for _, r := range h.requests() {
		sigs[r.sig] = true
	}
	if len(sigs) != 3 {
		t.Errorf("3 settle attempts carried %d distinct signatures, want 3", len(sigs))
	}
	h.answer(client.RouteReserve,
		reply{status: http.StatusServiceUnavailable, body: `{"error":"queue full","code":"unavailable","retry_after_secs":7}`},
		reply{status: http.StatusServiceUnavailable, body: `{"error":"busy","code":"internal"}`, header: map[string]string{"Retry-After": "12"}},
		reply{status: http.StatusAccepted, body: `{"ticket":"t1"}`})
	var got Reserved
	req := client.ReservationRequest{Runner: "r", Queue: true, RequestID: client.NewRequestID(), Placement: placeSub.Placement}
	err = c.Retrier().Do(t.Context(), "reserve", func(ctx context.Context) error {
		var err error
		got, err = c.Reserve(ctx, req)
		return err
	})
	if err != nil || got.Ticket != "t1" {
		t.Fatalf("reserve = %+v, %v", got, err)
	}
	waits := clk.recorded()
	if len(waits) != 4 {
		t.Fatalf("waits %v, want 4", waits)
	}
	if w := waits[0]; w < time.Second || w >= 1500*time.Millisecond {
		t.Errorf("first settle backoff %v, want [1s, 1.5s)", w)
	}
	if w := waits[2]; w < 7*time.Second || w >= 7700*time.Millisecond {
		t.Errorf("wait after retry_after_secs 7 = %v, want [7s, 7.7s)", w)
	}
	if w := waits[3]; w < 12*time.Second || w >= 13200*time.Millisecond {
		t.Errorf("wait after Retry-After: 12 = %v, want [12s, 13.2s)", w)
	}
	var bodies []string
	for _, r := range h.requests()[3:] {
		bodies = append(bodies, string(r.body))
	}
	if d := cmp.Diff([]string{bodies[0], bodies[0], bodies[0]}, bodies); d != "" {
		t.Errorf("retried reservation bodies differ (request_id must be kept):\n%s", d)
	}
}
