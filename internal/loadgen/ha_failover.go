package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/vk-ci/vk/hub/pki"
)

// failWatch collects, for the failover being measured, the grants the
// loops got for requests sent after the kill.
type failWatch struct {
	mu     sync.Mutex
	killed time.Time    // zero while no failover is measured
	first  time.Time    // the first such grant's arrival
	seen   map[int]bool // the loops that had one
	all    time.Time    // when the last loop had one
	loops  int
	done   chan struct{} // closed once every loop had one
}

// arm starts measuring a failover of a fleet of n loops killed at t0.
func (w *failWatch) arm(t0 time.Time, n int) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.killed, w.first, w.all, w.seen, w.loops = t0, time.Time{}, time.Time{}, map[int]bool{}, n
	w.done = make(chan struct{})
	return w.done
}

// granted records loop i's grant of a request sent at sent. Only a
// request sent after the kill counts: the killed leader cannot have
// answered it.
func (w *failWatch) granted(i int, sent time.Time) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.killed.IsZero() || !sent.After(w.killed) || w.seen[i] {
		return
	}
	if w.first.IsZero() {
		w.first = now
	}
	w.seen[i] = true
	if len(w.seen) == w.loops {
		w.all = now
		close(w.done)
	}
}

// result returns the measured times since the kill and disarms.
func (w *failWatch) result() (first, all time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	first, all = w.first.Sub(w.killed), w.all.Sub(w.killed)
	w.killed = time.Time{}
	return first, all
}

// killLeader SIGKILLs instance li (the leader), measures the failover
// to the other, then starts li again as a standby and waits until it
// holds every node's session.
func (r *haRun) killLeader(ctx context.Context, li int) (Failover, error) {
	lead, sb := r.inst[li], r.inst[1-li]
	f := Failover{Killed: lead.name}
	if _, err := r.waitHealth(ctx, sb, r.o.sessionsWait(), func(h health) bool { return h.Role == "standby" && h.Nodes >= r.o.Nodes }); err != nil {
		return f, fmt.Errorf("%s before the kill: %w", sb.name, err)
	}
	if err := r.waitProgress(ctx, int64(r.o.Loops)); err != nil {
		return f, fmt.Errorf("before the kill: %w", err)
	}
	t0 := time.Now()
	done := r.watch.arm(t0, r.o.Loops)
	if err := lead.t.Kill(); err != nil {
		return f, err
	}
	lead.t = nil
	if _, err := r.waitHealth(ctx, sb, 60*time.Second, func(h health) bool { return h.Role == "leader" }); err != nil {
		return f, fmt.Errorf("%s never led: %w", sb.name, err)
	}
	f.Elected = time.Since(t0)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return f, fmt.Errorf("not every loop was granted by %s within 2 min of the kill", sb.name)
	case <-ctx.Done():
		return f, ctx.Err()
	}
	f.FirstGrant, f.AllLoops = r.watch.result()
	if err := r.start(ctx, lead); err != nil {
		return f, err
	}
	if _, err := r.waitHealth(ctx, lead, r.o.sessionsWait(), func(h health) bool { return h.Role == "standby" && h.Nodes >= r.o.Nodes }); err != nil {
		return f, fmt.Errorf("%s restarted never held every node's session: %w", lead.name, err)
	}
	f.Resynced = time.Since(t0)
	return f, nil
}

// health is the part of an instance's GET /healthz the run reads.
type health struct {
	Role  string `json:"role"`
	Epoch uint64 `json:"epoch"`
	Nodes int    `json:"nodes"`
}

// waitHealth polls in's /healthz every 20 ms until ok accepts it or
// within passes.
func (r *haRun) waitHealth(ctx context.Context, in *haInstance, within time.Duration, ok func(health) bool) (health, error) {
	c, err := r.httpClient()
	if err != nil {
		return health{}, err
	}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(within)
	var last health
	var lastErr error
	for {
		last, lastErr = getHealth(ctx, c, in.addr)
		if lastErr == nil && ok(last) {
			return last, nil
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("%s after %v: health %+v, %v", in.name, within, last, lastErr)
		}
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return last, err
		}
	}
}

// httpClient is an HTTPS client pinning the instances' CA (one for both).
func (r *haRun) httpClient() (*http.Client, error) {
	tcfg, err := pki.ClientConfig(r.caPEM(), "127.0.0.1")
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tcfg}}, nil
}

// caPEM is the instances' CA, as hub-a made it.
func (r *haRun) caPEM() []byte {
	for _, in := range r.inst {
		if in.t != nil {
			return in.t.CAPEM
		}
	}
	return nil
}

func getHealth(ctx context.Context, c *http.Client, addr string) (health, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "https://"+addr+"/healthz", nil)
	if err != nil {
		return health{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return health{}, err
	}
	defer resp.Body.Close()
	var h health
	if resp.StatusCode != http.StatusOK {
		return h, fmt.Errorf("healthz: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&h)
	return h, err
}
