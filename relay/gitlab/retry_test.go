package gitlab

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// scriptedDoer answers requests from a list of (status, header) pairs and
// records when each arrived and the body it carried.
type scriptedDoer struct {
	mu      sync.Mutex
	answers []*http.Response
	errs    []error
	times   []time.Time
	bodies  []string
}

func (d *scriptedDoer) Do(req *http.Request) (*http.Response, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := len(d.times)
	d.times = append(d.times, time.Now())
	var b []byte
	if req.Body != nil {
		b, _ = io.ReadAll(req.Body)
	}
	d.bodies = append(d.bodies, string(b))
	if i < len(d.errs) && d.errs[i] != nil {
		return nil, d.errs[i]
	}
	if i >= len(d.answers) {
		return resp(200, nil), nil
	}
	return d.answers[i], nil
}

func resp(status int, h http.Header) *http.Response {
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("x"))}
}

func newReq(t *testing.T, ctx context.Context) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://gitlab.example.com/api/v4/jobs/request", bytes.NewReader([]byte("body")))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// gaps returns the waits between attempts.
func (d *scriptedDoer) gaps() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(d.times); i++ {
		out = append(out, d.times[i].Sub(d.times[i-1]))
	}
	return out
}

// The retry layer waits as GitLab asks (Retry-After seconds,
// RateLimit-ResetTime), else backs off exponentially; it stops at 5 tries
// and returns the last answer; the body is sent afresh each time.
// spec: GL-04
func TestRetryDoerWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		reset := start.Add(10 * time.Second).UTC().Truncate(time.Second).Add(time.Second) // an HTTP date ≥ 10 s away
		d := &scriptedDoer{answers: []*http.Response{
			resp(429, http.Header{"Retry-After": {"7"}}),
			resp(503, http.Header{"Ratelimit-Resettime": {reset.Format(http.TimeFormat)}}),
			resp(502, nil),
			resp(500, nil),
			resp(503, http.Header{"Retry-After": {"3"}}),
		}}
		r := &RetryDoer{Next: d, Jitter: func(d time.Duration) time.Duration { return d }}
		got, err := r.Do(newReq(t, t.Context()))
		if err != nil {
			t.Fatal(err)
		}
		if got.StatusCode != 503 || got.Header.Get("Retry-After") != "3" {
			t.Errorf("last answer = %d %v, want the 5th (503, Retry-After 3)", got.StatusCode, got.Header)
		}
		gaps := d.gaps()
		want := []time.Duration{7 * time.Second, reset.Sub(start.Add(7 * time.Second)), 100 * time.Millisecond, 200 * time.Millisecond}
		if len(gaps) != len(want) {
			t.Fatalf("gaps = %v, want %v", gaps, want)
		}
		for i := range want {
			if gaps[i] != want[i] {
				t.Errorf("wait %d = %v, want %v", i, gaps[i], want[i])
			}
		}
		for i, b := range d.bodies {
			if b != "body" {
				t.Errorf("attempt %d body = %q", i, b)
			}
		}
	})
}

// Statuses outside the retry set and transport errors are returned at once.
func TestRetryDoerNoRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, status := range []int{200, 201, 204, 400, 403, 404, 409, 412, 416, 501, 505} {
			d := &scriptedDoer{answers: []*http.Response{resp(status, nil)}}
			got, err := (&RetryDoer{Next: d}).Do(newReq(t, t.Context()))
			if err != nil || got.StatusCode != status || len(d.times) != 1 {
				t.Errorf("status %d: %d attempts", status, len(d.times))
			}
		}
		boom := errors.New("connection refused")
		d := &scriptedDoer{errs: []error{boom}}
		if _, err := (&RetryDoer{Next: d}).Do(newReq(t, t.Context())); !errors.Is(err, boom) || len(d.times) != 1 {
			t.Errorf("transport error: err %v after %d attempts", err, len(d.times))
		}
	})
}

func TestRetryableStatus(t *testing.T) {
	for s := 100; s < 600; s++ {
		want := s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504 || s >= 512
		if got := RetryableStatus(s); got != want {
			t.Errorf("RetryableStatus(%d) = %v", s, got)
		}
	}
}

// A wait longer than MaxWait hands the answer back at once; a context
// ending mid-wait ends the call with its error.
// spec: GL-04
func TestRetryDoerMaxWaitAndContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &scriptedDoer{answers: []*http.Response{resp(429, http.Header{"Retry-After": {"120"}})}}
		got, err := (&RetryDoer{Next: d, MaxWait: time.Minute}).Do(newReq(t, t.Context()))
		if err != nil || got.StatusCode != 429 || len(d.times) != 1 {
			t.Errorf("MaxWait: %v %v after %d attempts", got, err, len(d.times))
		}

		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		d = &scriptedDoer{answers: []*http.Response{resp(503, http.Header{"Retry-After": {"30"}})}}
		start := time.Now()
		_, err = (&RetryDoer{Next: d}).Do(newReq(t, ctx))
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 5*time.Second || len(d.times) != 1 {
			t.Errorf("ctx: err %v after %v and %d attempts", err, time.Since(start), len(d.times))
		}
	})
}

// Without a server hint the backoff doubles from 100 ms to at most 60 s and
// the default jitter stays within ±25 %.
func TestRetryDoerBackoffBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var answers []*http.Response
		for range 12 {
			answers = append(answers, resp(500, nil))
		}
		d := &scriptedDoer{answers: answers}
		if _, err := (&RetryDoer{Next: d, Attempts: 12}).Do(newReq(t, t.Context())); err != nil {
			t.Fatal(err)
		}
		base := 100 * time.Millisecond
		for i, g := range d.gaps() {
			lo, hi := base-base/4, base+base/4
			if g < lo || g > hi {
				t.Errorf("wait %d = %v, want within [%v, %v]", i, g, lo, hi)
			}
			base = min(base*2, 60*time.Second)
		}
	})
}

// A request whose body cannot be regenerated is not repeated.
func TestRetryDoerNeedsGetBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &scriptedDoer{answers: []*http.Response{resp(503, nil)}}
		req := newReq(t, t.Context())
		req.GetBody = nil
		got, err := (&RetryDoer{Next: d}).Do(req)
		if err != nil || got.StatusCode != 503 || len(d.times) != 1 {
			t.Errorf("got %v %v after %d attempts", got, err, len(d.times))
		}
	})
}

// The client over a RetryDoer over a real server: a throttled job request
// is retried and the job arrives.
// spec: GL-04
func TestClientWithRetryDoer(t *testing.T) {
	n := 0
	var mu sync.Mutex
	body := readFixture(t, "job_response_successful.json")
	c, s := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	c.doer = &RetryDoer{Next: s.Client()}
	out, err := c.RequestJob(t.Context(), "tok", "")
	if err != nil || out.Kind != RequestJobReceived || out.Job.ID != 1001 {
		t.Fatalf("RequestJob = %v, %v", out.Kind, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}
