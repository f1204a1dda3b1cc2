package testfleet

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
)

// Transition is one change of a GitLab job's state as the harness saw it.
type Transition struct {
	// Job is GitLab's job ID.
	Job int64
	// From and To are the states before and after.
	From, To gitlabfake.JobState
	// At is when the harness noticed (within microseconds of the change:
	// the watcher wakes on the fake's change channel, it does not poll).
	At time.Time
}

// watcher records every state transition of the jobs it was told about on
// one fake GitLab.
type watcher struct {
	srv *gitlabfake.Server

	mu    sync.Mutex
	last  map[int64]gitlabfake.JobState // guarded by mu
	trans []Transition                  // guarded by mu
	wake  chan struct{}                 // closed and replaced on every new transition; guarded by mu
	done  chan struct{}
}

func newWatcher(ctx context.Context, srv *gitlabfake.Server) *watcher {
	w := &watcher{srv: srv, last: map[int64]gitlabfake.JobState{}, wake: make(chan struct{}), done: make(chan struct{})}
	go w.run(ctx)
	return w
}

func (w *watcher) add(ids ...int64) {
	w.mu.Lock()
	for _, id := range ids {
		if _, ok := w.last[id]; !ok {
			w.last[id] = ""
		}
	}
	w.mu.Unlock()
	w.scan()
}

func (w *watcher) run(ctx context.Context) {
	defer close(w.done)
	for {
		ch := w.srv.Changed()
		w.scan()
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

func (w *watcher) scan() {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]int64, 0, len(w.last))
	for id := range w.last {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	changed := false
	for _, id := range ids {
		st := w.srv.JobState(id)
		if st != w.last[id] {
			w.trans = append(w.trans, Transition{Job: id, From: w.last[id], To: st, At: now})
			w.last[id] = st
			changed = true
		}
	}
	if changed {
		close(w.wake)
		w.wake = make(chan struct{})
	}
}

// transitions returns a copy of every transition so far, oldest first.
func (w *watcher) transitions() []Transition {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Transition(nil), w.trans...)
}

// firstAt returns when job first entered state, or the zero time.
func (w *watcher) firstAt(job int64, state gitlabfake.JobState) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.trans {
		if t.Job == job && t.To == state {
			return t.At
		}
	}
	return time.Time{}
}
