package output

import (
	"context"
	"fmt"
	"sync"
)

// Mem is an in-memory [Store] for tests and the simulator: the same
// contract as [Dir] (both pass the same tests) without durability. Its
// zero value is not usable; call [NewMem]. Safe for concurrent use.
type Mem struct {
	mu     sync.Mutex
	closed bool               // guarded by mu
	done   chan struct{}      // closed by Close
	jobs   map[string]*memJob // guarded by mu
}

type memJob struct {
	data     []byte
	complete bool
	grow     chan struct{} // closed and replaced on any change
}

var _ Store = (*Mem)(nil)

// NewMem returns an empty in-memory output store.
func NewMem() *Mem {
	return &Mem{done: make(chan struct{}), jobs: map[string]*memJob{}}
}

// jobLocked returns the job's state, creating it; mu must be held.
func (m *Mem) jobLocked(ctx context.Context, job string) (*memJob, error) {
	if !ValidJob(job) {
		return nil, fmt.Errorf("%w: %q", ErrBadJob, job)
	}
	if m.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	j := m.jobs[job]
	if j == nil {
		j = &memJob{grow: make(chan struct{})}
		m.jobs[job] = j
	}
	return j, nil
}

func (j *memJob) notify() {
	close(j.grow)
	j.grow = make(chan struct{})
}

// Append implements [Store.Append].
func (m *Mem) Append(ctx context.Context, job string, offset int64, data []byte) (int64, error) {
	if offset < 0 {
		return 0, fmt.Errorf("output: negative offset %d: %w", offset, ErrGap)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j, err := m.jobLocked(ctx, job)
	if err != nil {
		return 0, err
	}
	length := int64(len(j.data))
	if offset > length {
		return length, fmt.Errorf("%w: job %s chunk at %d, output ends at %d", ErrGap, job, offset, length)
	}
	if offset+int64(len(data)) <= length {
		return length, nil
	}
	if j.complete {
		return length, fmt.Errorf("%w: job %s", ErrComplete, job)
	}
	j.data = append(j.data, data[length-offset:]...)
	j.notify()
	return int64(len(j.data)), nil
}

// ReadAt implements [Store.ReadAt].
func (m *Mem) ReadAt(ctx context.Context, job string, offset int64, max int) (Chunk, error) {
	if max <= 0 || max > MaxRead {
		max = MaxRead
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j, err := m.jobLocked(ctx, job)
	if err != nil {
		return Chunk{}, err
	}
	length := int64(len(j.data))
	c := Chunk{Offset: offset, Length: length}
	if offset < 0 || offset > length {
		return c, fmt.Errorf("%w: job %s offset %d, length %d", ErrOffset, job, offset, length)
	}
	n := min(int64(max), length-offset)
	if n > 0 {
		c.Data = append([]byte(nil), j.data[offset:offset+n]...)
	}
	c.Complete = j.complete && offset+n == length
	return c, nil
}

// MarkComplete implements [Store.MarkComplete].
func (m *Mem) MarkComplete(ctx context.Context, job string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, err := m.jobLocked(ctx, job)
	if err != nil {
		return err
	}
	if !j.complete {
		j.complete = true
		j.notify()
	}
	return nil
}

// Len implements [Store.Len].
func (m *Mem) Len(ctx context.Context, job string) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, err := m.jobLocked(ctx, job)
	if err != nil {
		return 0, false, err
	}
	return int64(len(j.data)), j.complete, nil
}

// Wait implements [Store.Wait].
func (m *Mem) Wait(ctx context.Context, job string, offset int64) error {
	m.mu.Lock()
	j, err := m.jobLocked(ctx, job)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	if int64(len(j.data)) > offset || j.complete {
		m.mu.Unlock()
		return nil
	}
	ch := j.grow
	m.mu.Unlock()
	return waitOn(ctx, ch, m.done)
}

// Drop implements [Store.Drop].
func (m *Mem) Drop(ctx context.Context, job string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, err := m.jobLocked(ctx, job)
	if err != nil {
		return err
	}
	delete(m.jobs, job)
	j.notify()
	return nil
}

// Close implements [Store.Close]. Closing twice is not an error.
func (m *Mem) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.done)
	}
	return nil
}
