package hub

import "net/http"

// leaseGated is the response writer of a leader's client-API request
// under a lease. When the handler starts its answer, the lease is checked
// by the local clock ([pgstore.Lease.Held]): if it may have expired, a
// newer leader may have changed what the handler read from this
// instance's memory (a job's view, a ticket's grant), so the answer is
// replaced by 503 unavailable and the client asks again, of the leader.
// Checking when the answer is written, not when the request came, is what
// covers a process paused in between (SIGSTOP, a stalled VM): it wakes
// still believing it leads, and its lease's goroutine has not yet run.
// An answer let through was read while the lease was held, so no other
// leader existed then (docs/ha.md, "A paused leader answers nothing").
type leaseGated struct {
	http.ResponseWriter
	held    func() bool
	started bool
	refused bool
}

func (g *leaseGated) WriteHeader(code int) {
	if g.started {
		return
	}
	g.started = true
	if g.held() {
		g.ResponseWriter.WriteHeader(code)
		return
	}
	g.refused = true
	clear(g.ResponseWriter.Header())
	writeUnavailable(g.ResponseWriter, "this hub instance's leader lease may have expired: send requests to the leader", "")
}

func (g *leaseGated) Write(b []byte) (int, error) {
	if !g.started {
		g.WriteHeader(http.StatusOK)
	}
	if g.refused {
		return len(b), nil
	}
	return g.ResponseWriter.Write(b)
}

// Flush flushes an answer let through.
func (g *leaseGated) Flush() {
	if f, ok := g.ResponseWriter.(http.Flusher); ok && g.started && !g.refused {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (g *leaseGated) Unwrap() http.ResponseWriter { return g.ResponseWriter }
