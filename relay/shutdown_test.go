package relay

import (
	"context"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/state"
)

// stallHub is the relay's hub client (a realhub.Tap in front of the real
// hub) with one route that never answers: each call of it blocks until
// its context ends, as against a hub that took the connection and went
// silent. Every other call goes to the real hub.
type stallHub struct {
	*realhub.Tap
	route   string        // client.Route* of the stalled calls
	stalled chan struct{} // closed at the first stalled call
	once    sync.Once
	// lostOutcomes answers every outcome 404 without asking the hub, as a
	// hub that lost the admission would: the relay then releases the
	// reservation itself (it does not when the hub took the outcome).
	lostOutcomes bool
}

func newStallHub(tap *realhub.Tap, route string) *stallHub {
	return &stallHub{Tap: tap, route: route, stalled: make(chan struct{})}
}

// stall blocks a call of route until ctx ends and reports whether it did.
func (h *stallHub) stall(ctx context.Context, route string) (bool, error) {
	if route != h.route {
		return false, nil
	}
	h.once.Do(func() { close(h.stalled) })
	<-ctx.Done()
	return true, ctx.Err()
}

func (h *stallHub) Outcome(ctx context.Context, admission string, o client.Outcome) error {
	if ok, err := h.stall(ctx, client.RouteOutcome); ok {
		return err
	}
	if h.lostOutcomes {
		return &client.StatusError{Status: http.StatusNotFound, Body: client.Error{Code: client.CodeNotFound, Error: "no such admission"}}
	}
	return h.Tap.Outcome(ctx, admission, o)
}

func (h *stallHub) OutcomeNext(ctx context.Context, admission string, o client.Outcome, next client.ReservationRequest) (hubclient.Reserved, error) {
	if ok, err := h.stall(ctx, client.RouteOutcome); ok {
		return hubclient.Reserved{}, err
	}
	if h.lostOutcomes {
		return hubclient.Reserved{}, &client.StatusError{Status: http.StatusNotFound, Body: client.Error{Code: client.CodeNotFound, Error: "no such admission"}}
	}
	return h.Tap.OutcomeNext(ctx, admission, o, next)
}

func (h *stallHub) Release(ctx context.Context, id string) error {
	if ok, err := h.stall(ctx, client.RouteReservationDelete); ok {
		return err
	}
	return h.Tap.Release(ctx, id)
}

// shutdownMargin bounds how long after its context ends Run may take to
// return in TestRunStopsAtDeadline. The relay's clock is the
// auto-advanced fake, so the test's 10-minute shutdown_timeout passes in
// about 2.4 s of real time; the margin is generous for a loaded machine,
// and below the 30 s, 60 s and 10 min the hub calls that used to outlive
// the deadline took.
const shutdownMargin = 20 * time.Second

// Run returns once the shutdown deadline passed even when hub calls made
// on the way out never succeed: an outcome the hub keeps refusing (503,
// retried with back-off) or never answers, a reservation release never
// answered, a GitLab job request never answered. Each goroutine Run
// started stops at the deadline, and a job still running then stays
// recorded in its state file for the next start.
//
// spec: RELAY-17, RELAY-18, RELAY-09, ARB-29, ARB-33
func TestRunStopsAtDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		// hub wraps the Tap; nil means the Tap itself.
		hub func(*realhub.Tap) *stallHub
		// refuse makes the hub answer every call of this route 503.
		refuse string
		// job: a pipeline whose job runs (and blocks) on the node; the
		// relay is stopped once GitLab has it running.
		job bool
		// holdRequest: GitLab never answers the relay's job request; the
		// relay is stopped once the grant is claimed.
		holdRequest bool
	}{
		{name: "outcome 503", refuse: client.RouteOutcome, job: true},
		{name: "outcome hangs", hub: func(tp *realhub.Tap) *stallHub { return newStallHub(tp, client.RouteOutcome) }, job: true},
		{name: "release hangs", hub: func(tp *realhub.Tap) *stallHub {
			h := newStallHub(tp, client.RouteReservationDelete)
			h.lostOutcomes = true
			return h
		}},
		{name: "request hangs", holdRequest: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const shutdownSecs = 600
			e := newRunEnv(t, shutdownSecs)
			opt := Options{Clock: e.clk, Hub: e.hub}
			var sh *stallHub
			if tc.hub != nil {
				sh = tc.hub(e.hub)
				opt.Hub = sh
			}
			if tc.refuse != "" {
				e.hub.SetFail(tc.refuse, 1<<30)
			}
			hold := make(chan struct{})
			t.Cleanup(func() { close(hold) })
			if tc.holdRequest {
				e.gl.InjectFault(gitlabfake.Fault{Route: gitlabfake.RouteJobRequest, Hold: hold})
			}
			var glID int64
			if tc.job {
				glID = e.pipeline(t, e.waitLine("never"))
				t.Cleanup(func() { e.release(t, "never") }) // the node's job ends before the node stops
			}

			ctx, stop := context.WithCancel(context.Background())
			var runErr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				runErr = Run(ctx, e.cfg, e.toks, testlog.New(t), opt)
			}()
			t.Cleanup(func() {
				stop()
				<-done // however long: the test's loggers must outlive Run
			})

			// Wait until the relay is in the call that will not succeed.
			switch {
			case tc.job:
				if _, err := e.gl.WaitJobState(t.Context(), glID, gitlabfake.StateRunning); err != nil {
					t.Fatal(err)
				}
			case tc.holdRequest:
				e.hub.WaitFor(t, "a claimed grant", func() bool { return e.hub.Answers[client.RouteClaim] > 0 })
			}
			switch {
			case sh != nil:
				select {
				case <-sh.stalled:
				case <-time.After(60 * time.Second):
					t.Fatalf("the relay never called %s", sh.route)
				}
			case tc.refuse != "":
				e.hub.WaitFor(t, "a refused "+tc.refuse, func() bool { return e.hub.Calls[tc.refuse] > 0 })
			}

			// The leak check below sees the relay's goroutines while it runs.
			if len(scanRelayGoroutines()) == 0 {
				t.Fatal("no goroutine of the relay found while Run runs: the leak check is blind")
			}

			// SIGTERM: Run must be back within the deadline plus a margin.
			began, fakeBegan := time.Now(), e.clk.Now()
			stop()
			select {
			case <-done:
				if runErr != nil {
					t.Errorf("Run = %v", runErr)
				}
				t.Logf("Run returned %v after its context ended", time.Since(began).Round(time.Millisecond))
			case <-time.After(shutdownMargin):
				t.Fatalf("Run still running %v after its context ended (shutdown_timeout %d s on a fast fake clock): a hub or GitLab call outlives the shutdown deadline",
					shutdownMargin, shutdownSecs)
			}
			if left := relayGoroutines(); left != "" {
				t.Errorf("goroutines of the relay still running after Run returned:\n%s", left)
			}
			// A running job (RELAY-18) and a job request already sent
			// (ARB-29) are given the whole shutdown_timeout, not less.
			if waited := e.clk.Now().Sub(fakeBegan); (tc.job || tc.holdRequest) && waited < shutdownSecs*time.Second {
				t.Errorf("Run returned %v (relay clock) after its context ended, before shutdown_timeout %d s", waited, shutdownSecs)
			}
			if tc.refuse != "" && e.hub.Count(tc.refuse) == 0 {
				t.Errorf("no %s call was made", tc.refuse)
			}

			// What was unfinished stays recorded for the next start.
			st, err := state.Open(e.cfg.StateDir, "r1", e.enrol.ID)
			if err != nil {
				t.Fatal(err)
			}
			jobs := st.Jobs()
			switch {
			case tc.job:
				if len(jobs) != 1 || jobs[0].GitLabID != glID || jobs[0].Phase != state.PhaseCommitted {
					t.Errorf("state file holds %+v, want GitLab job %d recorded as committed", jobs, glID)
				}
			default:
				if len(jobs) != 0 {
					t.Errorf("state file holds %+v, want no job (GitLab gave none)", jobs)
				}
			}
		})
	}
}

// relayGoroutines returns the stacks of goroutines running code of the
// relay's packages (relay, relay/loop, relay/hubsession), "" when none. A
// goroutine that signalled its end (a WaitGroup's Done) may still be on
// its way out, so it looks again for up to a second before answering:
// there is nothing else to wait on for a goroutine's exit.
func relayGoroutines() string {
	var left []string
	for range 100 {
		if left = scanRelayGoroutines(); len(left) == 0 {
			return ""
		}
		time.Sleep(10 * time.Millisecond)
	}
	return strings.Join(left, "\n\n")
}

// scanRelayGoroutines returns the stacks of the goroutines running code of
// the relay's packages now.
func scanRelayGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "vk-ci/vk/relay.Run") || strings.Contains(g, "vk-ci/vk/relay/loop.") ||
			strings.Contains(g, "vk-ci/vk/relay/hubsession.") {
			out = append(out, g)
		}
	}
	return out
}
