package loop

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/proto/client"
)

// cancelHub answers the canceller's Cancel calls, failing the first
// failFirst of them with a 503, and records each mode it was asked for.
// The rest of the Hub interface is not used by the canceller.
type cancelHub struct {
	Hub
	mu        sync.Mutex
	failFirst int
	calls     []client.CancelMode
}

func (h *cancelHub) Cancel(ctx context.Context, _ string, mode client.CancelMode) (client.JobView, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, mode)
	if len(h.calls) > 50 {
		// A storm: park the canceller so that the test ends and says so.
		h.mu.Unlock()
		<-ctx.Done()
		h.mu.Lock()
		return client.JobView{}, ctx.Err()
	}
	if len(h.calls) <= h.failFirst {
		return client.JobView{}, &client.StatusError{Status: http.StatusServiceUnavailable,
			Body: client.Error{Code: client.CodeUnavailable, Error: "busy"}}
	}
	return client.JobView{}, nil
}

func (h *cancelHub) modes() []client.CancelMode {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]client.CancelMode(nil), h.calls...)
}

// A requested cancel reaches the hub once; it is sent again only after the
// hub failed it, and a stronger request is sent once more. Before the fix
// the canceller re-sent the same cancel back to back until the job ended.
//
// spec: RELAY-15
func TestCancelDeliveredOnce(t *testing.T) {
	type req struct {
		mode  client.CancelMode
		after time.Duration // of fake time since the previous request
	}
	cases := []struct {
		name      string
		failFirst int
		reqs      []req
		want      []client.CancelMode
	}{
		{"graceful once", 0, []req{{client.CancelGraceful, 0}},
			[]client.CancelMode{client.CancelGraceful}},
		{"repeated request ignored", 0, []req{{client.CancelGraceful, 0}, {client.CancelGraceful, time.Minute}},
			[]client.CancelMode{client.CancelGraceful}},
		{"retried after a failure", 2, []req{{client.CancelGraceful, 0}},
			[]client.CancelMode{client.CancelGraceful, client.CancelGraceful, client.CancelGraceful}},
		{"immediate supersedes", 0, []req{{client.CancelGraceful, 0}, {client.CancelImmediate, time.Minute}, {client.CancelGraceful, time.Minute}},
			[]client.CancelMode{client.CancelGraceful, client.CancelImmediate}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := &cancelHub{failFirst: tc.failFirst}
				m := &Manager{cfg: Config{Hub: h}, retry: &hubclient.Retrier{Min: time.Second, Max: time.Second}}
				c := &canceller{m: m, hubJob: "j1", log: testlog.New(t), wake: make(chan struct{}, 1)}
				ctx, stop := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() { defer close(done); c.run(ctx) }()
				for _, r := range tc.reqs {
					time.Sleep(r.after)
					c.request(r.mode)
					synctest.Wait()
				}
				// An hour of fake time: a storm would send thousands.
				time.Sleep(time.Hour)
				synctest.Wait()
				got := h.modes()
				stop()
				<-done
				if len(got) != len(tc.want) {
					t.Fatalf("cancels sent %d times %v, want %v", len(got), got, tc.want)
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Fatalf("cancels %v, want %v", got, tc.want)
					}
				}
			})
		})
	}
}
