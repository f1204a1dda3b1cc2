package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"crypto/tls"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/reqsign"
)

// lifecycleOutput is the output a benchmark job writes: a few KiB.
var lifecycleOutput = bytes.Repeat([]byte("log line of a benchmark job\n"), 150) // 4,200 bytes

// lifecycleNode plays a node that runs every job at once: it accepts each
// offer, and answers each start with accepted, the job's output in one
// chunk, finished and the result, from its own goroutine (Send is called
// on the driver's and must not call back).
type lifecycleNode struct {
	h      *harness
	frames chan dispatch.Message
}

func (n *lifecycleNode) Send(m dispatch.Message) error {
	n.frames <- m
	return nil
}

func (n *lifecycleNode) run(ctx context.Context) {
	d := n.h.srv.Driver()
	exit := 0
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-n.frames:
			switch m := m.(type) {
			case dispatch.Offer:
				d.NodeFrame(ctx, "n1", &dispatch.OfferReply{Reservation: m.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
			case dispatch.Start:
				d.NodeFrame(ctx, "n1", &dispatch.JobUpdate{Job: m.Job, State: dispatch.JobAccepted})
				d.NodeFrame(ctx, "n1", &dispatch.Output{Job: m.Job, Offset: 0, Data: lifecycleOutput})
				d.NodeFrame(ctx, "n1", &dispatch.JobUpdate{Job: m.Job, State: dispatch.JobFinished})
				d.NodeFrame(ctx, "n1", &dispatch.Result{Job: m.Job, Result: client.JobResult{ExitCode: &exit, OutputLen: int64(len(lifecycleOutput))}})
			}
		}
	}
}

// lifecycleFleet connects a lifecycleNode, running until b ends, and a
// relay of loops runners to h.
func lifecycleFleet(b *testing.B, h *harness, loops int) {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	node := &lifecycleNode{h: h, frames: make(chan dispatch.Message, 1<<16)}
	go node.run(ctx)
	benchFleet(b, h, node, loops)
}

// lifecycleSteps name the client-API requests of a lifecycle, in order.
var lifecycleSteps = []string{"reserve", "ticket", "claim", "outcome", "submit", "follow", "output", "settle"}

// latencies collects each step's request latencies from several loops.
type latencies struct {
	mu sync.Mutex
	by map[string][]time.Duration
}

func (l *latencies) add(local map[string][]time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, v := range local {
		l.by[k] = append(l.by[k], v...)
	}
}

// report adds each step's p50 and p99 in milliseconds to b's metrics.
func (l *latencies) report(b *testing.B) {
	for _, step := range lifecycleSteps {
		d := l.by[step]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		q := func(p float64) float64 { return d[min(len(d)-1, int(p*float64(len(d))))].Seconds() * 1e3 }
		b.ReportMetric(q(0.50), step+"-p50-ms")
		b.ReportMetric(q(0.99), step+"-p99-ms")
	}
}

// answered checks a benchmark request's answer: status want, and the
// body decoded into out unless out is nil. It reports a mismatch on b.
func answered(b *testing.B, code int, resp []byte, want int, out any, method, path string) bool {
	if code != want {
		b.Errorf("%s %s = %d %s, want %d", method, path, code, resp, want)
		return false
	}
	if out != nil && json.Unmarshal(resp, out) != nil {
		b.Errorf("%s %s: undecodable %s", method, path, resp)
		return false
	}
	return true
}

// BenchmarkLifecycle runs full client-API job lifecycles from 8
// concurrent loops (one runner each) against the real hub over TLS 1.3
// with signed requests, one connection per request (AUTH-14), bbolt store:
// reserve (202) → the node accepts the offer → ticket (201) → claim →
// outcome job → submit (201) → the node accepts, writes 4 KiB of output
// (acked), finishes and sends its result → the relay follows the job's
// view until finished → reads the output → settles. Eight or more
// requests per lifecycle. "fresh" makes a full TLS handshake per request;
// "resumed" resumes the client's last TLS session (as hubclient did with
// a connection per request); "kept" keeps connections alive (as hubclient
// does now, reqsign.Pool). It reports lifecycles/s and each request's
// p50/p99 in milliseconds.
func BenchmarkLifecycle(b *testing.B) {
	for _, mode := range []string{"fresh", "resumed", "kept"} {
		b.Run(mode, func(b *testing.B) { benchLifecycle(b, mode) })
	}
}

func benchLifecycle(b *testing.B, mode string) {
	h := newHarness(b)
	tcfg, err := pki.ClientConfig(h.srv.CAPEM(), "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	switch mode {
	case "kept":
		benchConn(b, h, "kept")
	case "resumed":
		tcfg.ClientSessionCache = tls.NewLRUClientSessionCache(16)
		fallthrough
	default:
		h.hc = &http.Client{Transport: &reqsign.Transport{Key: h.key, Principal: h.relay, TLSConfig: tcfg, Now: h.clk.Now}}
	}

	const loops = 8
	lifecycleFleet(b, h, loops)

	lat := &latencies{by: map[string][]time.Duration{}}
	var next, gitlabJob atomic.Int64
	b.SetParallelism(loops / 2) // GOMAXPROCS 2 × 4 = 8 loops
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		runner := fmt.Sprintf("p%d", next.Add(1)-1)
		local := map[string][]time.Duration{}
		defer lat.add(local)
		// call sends one request, times it under step and checks its status.
		call := func(step string, want int, out any, method, path string, body any) bool {
			t0 := time.Now()
			code, resp, _ := h.call(method, path, body)
			local[step] = append(local[step], time.Since(t0))
			return answered(b, code, resp, want, out, method, path)
		}
		for pb.Next() {
			var tk client.ReservationTicket
			var g client.ReservationGrant
			var v client.JobView
			if !call("reserve", http.StatusAccepted, &tk, "POST", "/v1/reservations", client.ReservationRequest{Runner: runner, Queue: true,
				RequestID: client.NewRequestID(), Placement: testPlacement}) ||
				!call("ticket", http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk.Ticket+"?wait=30", nil) ||
				!call("claim", http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/claim", nil) ||
				!call("outcome", http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome",
					client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob}) ||
				!call("submit", http.StatusCreated, &v, "POST", "/v1/jobs", client.JobSubmission{Runner: runner, Admission: g.Admission,
					Reservation: g.Reservation, RequestID: client.NewRequestID(), Placement: testPlacement, PlaceWithinSecs: 300,
					Spec: testSpec(gitlabJob.Add(1))}) {
				return
			}
			for v.State != client.JobFinished {
				if !call("follow", http.StatusOK, &v, "GET", "/v1/jobs/"+v.ID+"?after="+strconv.FormatUint(v.Revision, 10)+"&wait=30", nil) {
					return
				}
			}
			if !call("output", http.StatusOK, nil, "GET", "/v1/jobs/"+v.ID+"/output?offset=0", nil) ||
				!call("settle", http.StatusNoContent, nil, "POST", "/v1/jobs/"+v.ID+"/settle", nil) {
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lifecycles/s")
	lat.report(b)
}
