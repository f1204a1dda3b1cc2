package gitlab

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vk-ci/vk/internal/testlog"
)

// TestConnectionsKeptForLaterRequests sends two waves of concurrent job
// updates over TLS and counts the connections GitLab sees: the second
// wave reuses the first's, as the relay's requests do when a runner's
// request loops and its jobs' updates end together. With Go's default of
// two idle connections per host, the second wave paid six new TLS
// handshakes (a job's commit, on the hand-off's path, among them).
func TestConnectionsKeptForLaterRequests(t *testing.T) {
	const wave = 8
	var conns atomic.Int64
	var arrived sync.WaitGroup
	var gate chan struct{}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-gate // every request of the wave is in flight at once
		w.WriteHeader(http.StatusOK)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	roots := s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	c, err := New(Config{URL: s.URL, RootCAs: roots, Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		gate = make(chan struct{})
		arrived.Add(wave)
		var done sync.WaitGroup
		for i := range wave {
			done.Go(func() {
				out, err := c.UpdateJob(t.Context(), JobCredentials{ID: int64(i + 1), Token: "token"}, UpdateJobInfo{State: StateRunning})
				if err != nil || out.Kind != UpdateSucceeded {
					t.Errorf("round %d: UpdateJob = %+v, %v", round, out, err)
				}
			})
		}
		arrived.Wait()
		close(gate)
		done.Wait()
	}
	if n := conns.Load(); n != wave {
		t.Errorf("GitLab saw %d connections for two waves of %d concurrent updates, want %d (the second wave on the first's)", n, wave, wave)
	}
}
