package loop

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/realhub"
	"github.com/vk-ci/vk/proto/client"
)

// emptyCycles runs the env's runner against a GitLab without long polling
// until the hub took `empties` empty outcomes, and returns the hub calls
// made by then, by route. A job then still runs to success on whatever the
// loops hold, so the cheaper cycle loses no job; the POSTs made by its end
// are returned too.
func emptyCycles(t *testing.T, e *env, hub Hub, empties int) (map[string]int, int) {
	t.Helper()
	m := e.managerVia(hub, 0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	var calls map[string]int
	e.hub.WaitFor(t, "empty outcomes", func() bool {
		if len(e.hub.AdmissionsWithLocked(client.OutcomeEmpty)) < empties {
			return false
		}
		calls = map[string]int{}
		for r, n := range e.hub.Calls {
			calls[r] = n
		}
		return true
	})
	glID := e.pipeline([]string{"true"})
	e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	e.settled(e.hub.OnlyJob(t))
	stop(false)
	return calls, e.hub.Count(client.RouteReserve)
}

// An empty answer from GitLab costs the hub a claim and an outcome, and
// the ticket poll of the reservation the outcome asked for: with relay
// session version 4 the outcome carries the next reservation request, so
// no POST /v1/reservations follows it; nor does one follow a job's
// outcome. Against a version-3 hub every cycle still POSTs.
//
// spec: ARB-02, ARB-33, ARB-34, RSESS-10
func TestEmptyPollCarriesTheNextReservation(t *testing.T) {
	const empties = 3
	for _, tc := range []struct {
		version int
		// reserves bounds the POSTs by the time of the empties' outcomes.
		minReserves, maxReserves int
	}{
		{client.RelayVersionUpdates, empties, empties + 1},
		{client.RelayVersionNext, 1, 1}, // the first reservation only
	} {
		t.Run("version "+string(rune('0'+tc.version)), func(t *testing.T) {
			e := newEnv(t, envOptions{gitlab: gitlabfake.Options{LongPoll: -1}})
			e.hubVersion = tc.version
			calls, total := emptyCycles(t, e, e.hub, empties)
			t.Logf("by the %d empty outcomes: %v; POSTs by the job's end: %d", empties, calls, total)
			if n := calls[client.RouteReserve]; n < tc.minReserves || n > tc.maxReserves {
				t.Errorf("%d POST /v1/reservations, want %d..%d", n, tc.minReserves, tc.maxReserves)
			}
			if tc.version >= client.RelayVersionNext && total != 1 {
				t.Errorf("%d POST /v1/reservations by the job's end, want 1: the job's outcome and the empty ones carried the next", total)
			}
			if n := calls[client.RouteReservationDelete]; n != 0 {
				t.Errorf("%d reservation DELETEs, want 0 (the outcome releases)", n)
			}
			e.hub.Mu.Lock()
			next := e.hub.NextAnswered
			e.hub.Mu.Unlock()
			if tc.version >= client.RelayVersionNext && next < empties {
				t.Errorf("%d outcomes carried a next reservation, want at least %d", next, empties)
			}
			if tc.version < client.RelayVersionNext && next != 0 {
				t.Errorf("%d outcomes carried a next reservation to a version-%d hub, want 0", next, tc.version)
			}
		})
	}
}

// nextHub answers OutcomeNext itself: refusing it 400 (a hub instance that
// predates the field), or taking the outcome alone and queueing nothing
// (204, as the hub answers when next failed). It records the request_ids
// sent in next and in POST /v1/reservations.
type nextHub struct {
	*realhub.Tap
	refuse bool

	mu        sync.Mutex
	nextIDs   []string
	reserveID map[string]bool
}

func (h *nextHub) OutcomeNext(ctx context.Context, admission string, o client.Outcome, next client.ReservationRequest) (hubclient.Reserved, error) {
	h.mu.Lock()
	h.nextIDs = append(h.nextIDs, next.RequestID)
	h.mu.Unlock()
	if h.refuse {
		return hubclient.Reserved{}, &client.StatusError{Status: http.StatusBadRequest,
			Body: client.Error{Code: client.CodeInvalid, Error: `unparseable request body: json: unknown field "next"`}}
	}
	return hubclient.Reserved{}, h.Tap.Outcome(ctx, admission, o)
}

func (h *nextHub) Reserve(ctx context.Context, req client.ReservationRequest) (hubclient.Reserved, error) {
	h.mu.Lock()
	h.reserveID[req.RequestID] = true
	h.mu.Unlock()
	return h.Tap.Reserve(ctx, req)
}

// A next the hub did not queue is sent as a POST under its own
// request_id, so a ticket made by an answer that was lost is found, not
// doubled; a hub refusing next 400 gets the outcome alone, then a POST.
// Either way every empty outcome is taken and a job still runs.
//
// spec: ARB-33, API-44
func TestEmptyPollNextNotQueued(t *testing.T) {
	const empties = 3
	for _, refuse := range []bool{false, true} {
		name := "taken alone"
		if refuse {
			name = "refused 400"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envOptions{gitlab: gitlabfake.Options{LongPoll: -1}})
			h := &nextHub{Tap: e.hub, refuse: refuse, reserveID: map[string]bool{}}
			calls, _ := emptyCycles(t, e, h, empties)
			if n := calls[client.RouteReserve]; n < empties {
				t.Errorf("%d POST /v1/reservations by %d empty outcomes, want at least %d", n, empties, empties)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if len(h.nextIDs) < empties {
				t.Fatalf("%d outcomes carried next, want at least %d", len(h.nextIDs), empties)
			}
			// Every next but one still in flight was then POSTed under its
			// own request_id.
			for _, id := range h.nextIDs[:empties-1] {
				if !h.reserveID[id] {
					t.Errorf("next request_id %s never sent as POST /v1/reservations", id)
				}
			}
		})
	}
}
