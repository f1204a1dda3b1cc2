package loop

import (
	"context"
	"sync"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/proto/client"
)

// Hub is the part of the hub's client API the loops use. *hubclient.Client
// implements it; the methods' contracts are hubclient's.
type Hub interface {
	Reserve(ctx context.Context, req client.ReservationRequest) (hubclient.Reserved, error)
	PollTicket(ctx context.Context, ticket string, wait time.Duration) (hubclient.Reserved, error)
	CancelTicket(ctx context.Context, ticket string) error
	Claim(ctx context.Context, id string) error
	Renew(ctx context.Context, id string, leaseSecs int) (client.ReservationGrant, error)
	Release(ctx context.Context, id string) error
	Outcome(ctx context.Context, admission string, o client.Outcome) error
	OutcomeNext(ctx context.Context, admission string, o client.Outcome, next client.ReservationRequest) (hubclient.Reserved, error)
	SubmitJob(ctx context.Context, sub client.JobSubmission) (client.JobView, error)
	GetJob(ctx context.Context, id string, after uint64, wait time.Duration) (client.JobView, error)
	ReadOutput(ctx context.Context, id string, offset int64, wait time.Duration) (hubclient.Output, error)
	Cancel(ctx context.Context, id string, mode client.CancelMode) (client.JobView, error)
	Settle(ctx context.Context, id string) error
}

var _ Hub = (*hubclient.Client)(nil)

// Gate is open while the hub says the GitLab server is approved: runners
// ask GitLab for jobs only then (RSESS-07). The zero value is closed (no status received yet).
// Safe for concurrent use.
type Gate struct {
	mu     sync.Mutex
	open   bool
	change chan struct{} // closed and replaced on every change; guarded by mu
}

// Set opens or closes the gate.
func (g *Gate) Set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == open {
		return
	}
	g.open = open
	if g.change != nil {
		close(g.change)
		g.change = nil
	}
}

// Open reports whether the gate is open.
func (g *Gate) Open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// changed returns whether the gate is open and a channel closed at its next
// change.
func (g *Gate) changed() (bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.change == nil {
		g.change = make(chan struct{})
	}
	return g.open, g.change
}

// Wait blocks until the gate is open or ctx ends (returning ctx's error).
func (g *Gate) Wait(ctx context.Context) error {
	for {
		open, ch := g.changed()
		if open {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Slots counts the jobs the relay handles against concurrent and each
// runner's limit (ARB-25, RELAY-10). A slot is taken on a grant and given
// back on an empty or failed request, or once the job is settled. Safe for
// concurrent use.
type Slots struct {
	mu         sync.Mutex
	concurrent int            // 0 means no bound
	total      int            // guarded by mu
	held       map[string]int // by runner; guarded by mu
	freed      chan struct{}  // closed at the next Release; guarded by mu
}

// changed returns a channel closed at the next Release.
func (s *Slots) changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed == nil {
		s.freed = make(chan struct{})
	}
	return s.freed
}

// NewSlots returns a counter bounded by concurrent (0: no bound).
func NewSlots(concurrent int) *Slots {
	return &Slots{concurrent: concurrent, held: map[string]int{}}
}

// TryAcquire takes a slot for runner when both concurrent and limit (0: no
// limit) leave room, and reports whether it did.
func (s *Slots) TryAcquire(runner string, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.concurrent > 0 && s.total >= s.concurrent {
		return false
	}
	if limit > 0 && s.held[runner] >= limit {
		return false
	}
	s.total++
	s.held[runner]++
	return true
}

// Acquire takes a slot for runner unconditionally (a job resumed at start,
// which the hub still charges).
func (s *Slots) Acquire(runner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total++
	s.held[runner]++
}

// Release gives back one of runner's slots.
func (s *Slots) Release(runner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[runner] > 0 {
		s.held[runner]--
		s.total--
	}
	if s.freed != nil {
		close(s.freed)
		s.freed = nil
	}
}

// Held returns how many slots runner holds and how many are held in all.
func (s *Slots) Held(runner string) (runnerHeld, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[runner], s.total
}
