package hub

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/vk-ci/vk/proto/client"
)

// BenchmarkEmptyPoll runs the hub's side of empty GitLab answers from 8
// concurrent loops (one runner each) over TLS 1.3 with signed requests on
// kept-alive connections, bbolt store, with the node accepting every
// offer at once. Each cycle is one grant claimed, asked of GitLab (not
// here) and given back as released (a Workhorse-ended long poll, which
// backs nothing off, so the cycle rate is the hub's own):
//
//   - "post" (relay session version 3): POST /v1/reservations (202) →
//     ticket GET (201) → claim → outcome;
//   - "next" (version 4): claim → outcome with next (202) → ticket GET
//     (201), the next cycle's grant.
//
// It reports cycles/s and hub requests per cycle.
func BenchmarkEmptyPoll(b *testing.B) {
	for _, mode := range []string{"post", "next"} {
		b.Run(mode, func(b *testing.B) { benchEmptyPoll(b, mode == "next") })
	}
}

func benchEmptyPoll(b *testing.B, carry bool) {
	h := newHarness(b)
	benchConn(b, h, "kept")
	const loops = 8
	lifecycleFleet(b, h, loops)

	var runners, requests atomic.Int64
	b.SetParallelism(loops / 2) // GOMAXPROCS 2 × 4 = 8 loops
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		runner := fmt.Sprintf("p%d", runners.Add(1)-1)
		call := func(want int, out any, method, path string, body any) bool {
			requests.Add(1)
			code, resp, _ := h.call(method, path, body)
			return answered(b, code, resp, want, out, method, path)
		}
		newReq := func() client.ReservationRequest {
			return client.ReservationRequest{Runner: runner, Queue: true, RequestID: client.NewRequestID(), Placement: testPlacement}
		}
		var tk client.ReservationTicket
		var g client.ReservationGrant
		if carry && (!call(http.StatusAccepted, &tk, "POST", "/v1/reservations", newReq()) ||
			!call(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk.Ticket+"?wait=30", nil)) {
			return
		}
		for pb.Next() {
			out := client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeReleased}
			if carry {
				next := newReq()
				out.Next = &next
				if !call(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/claim", nil) ||
					!call(http.StatusAccepted, &tk, "POST", "/v1/reservations/"+g.Admission+"/outcome", out) ||
					!call(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk.Ticket+"?wait=30", nil) {
					return
				}
				continue
			}
			if !call(http.StatusAccepted, &tk, "POST", "/v1/reservations", newReq()) ||
				!call(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk.Ticket+"?wait=30", nil) ||
				!call(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/claim", nil) {
				return
			}
			out.Admission = g.Admission
			if !call(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", out) {
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	b.ReportMetric(float64(requests.Load())/float64(b.N), "requests/cycle")
}
