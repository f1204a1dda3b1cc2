package ui

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
)

// fakeBackend is an in-memory Backend: nodes, queue, jobs and outputs
// set by the test, and a record of every change asked of it. Errors set
// in fail are returned by the named method.
type fakeBackend struct {
	mu       sync.Mutex
	nodes    []admin.Node
	queue    []Waiting
	jobs     []JobRow
	relays   []RelayRow
	outputs  map[string][]byte
	policy   admin.Policy
	changed  []store.Approval
	calls    []string
	fail     map[string]error
	jobLimit int
}

var _ Backend = (*fakeBackend)(nil)

func (f *fakeBackend) err(method string) error {
	if f.fail != nil {
		return f.fail[method]
	}
	return nil
}

func (f *fakeBackend) findLocked(id string) (*admin.Node, error) {
	for i := range f.nodes {
		if f.nodes[i].ID == id {
			return &f.nodes[i], nil
		}
	}
	return nil, fmt.Errorf("fake: node %q: %w", id, admin.ErrNotFound)
}

func (f *fakeBackend) Nodes(context.Context) ([]admin.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.err("Nodes"); err != nil {
		return nil, err
	}
	out := make([]admin.Node, len(f.nodes))
	for i, n := range f.nodes {
		n.Pools, n.Labels = slices.Clone(n.Pools), slices.Clone(n.Labels)
		out[i] = n
	}
	return out, nil
}

func (f *fakeBackend) SetPools(_ context.Context, id string, pools []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.err("SetPools"); err != nil {
		return err
	}
	n, err := f.findLocked(id)
	if err != nil {
		return err
	}
	n.Pools = slices.Clone(pools)
	f.calls = append(f.calls, fmt.Sprintf("SetPools %s %q", id, pools))
	return nil
}

func (f *fakeBackend) SetCeiling(_ context.Context, id string, c int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.err("SetCeiling"); err != nil {
		return err
	}
	n, err := f.findLocked(id)
	if err != nil {
		return err
	}
	n.Ceiling = c
	f.calls = append(f.calls, fmt.Sprintf("SetCeiling %s %d", id, c))
	return nil
}

func (f *fakeBackend) Drain(_ context.Context, id string, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.err("Drain"); err != nil {
		return err
	}
	n, err := f.findLocked(id)
	if err != nil {
		return err
	}
	n.State = map[bool]string{true: "draining", false: "ready"}[on]
	f.calls = append(f.calls, fmt.Sprintf("Drain %s %t", id, on))
	return nil
}

func (f *fakeBackend) Policy(context.Context) (admin.Policy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.policy, f.err("Policy")
}

func (f *fakeBackend) SetPolicy(_ context.Context, p admin.Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.policy = p
	f.calls = append(f.calls, "SetPolicy")
	return nil
}

func (f *fakeBackend) RelayRemoved(_ context.Context, relay string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "RelayRemoved "+relay)
	return nil
}

func (f *fakeBackend) NodeRemoved(_ context.Context, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "NodeRemoved "+node)
	return nil
}

func (f *fakeBackend) ApprovalChanged(_ context.Context, a store.Approval) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.err("ApprovalChanged"); err != nil {
		return err
	}
	f.changed = append(f.changed, a)
	f.calls = append(f.calls, fmt.Sprintf("ApprovalChanged %s %d %s", a.Instance, a.Project, a.State))
	return nil
}

func (f *fakeBackend) Queue(context.Context) ([]Waiting, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.queue), f.err("Queue")
}

func (f *fakeBackend) Relays(context.Context) ([]RelayRow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.relays), f.err("Relays")
}

func (f *fakeBackend) Jobs(_ context.Context, limit int) ([]JobRow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobLimit = limit
	if err := f.err("Jobs"); err != nil {
		return nil, err
	}
	return slices.Clone(f.jobs[:min(limit, len(f.jobs))]), nil
}

func (f *fakeBackend) JobOutputTail(_ context.Context, id string, max int) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.err("JobOutputTail"); err != nil {
		return nil, err
	}
	b, ok := f.outputs[id]
	if !ok {
		return nil, fmt.Errorf("fake: job %q: %w", id, ErrNoOutput)
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return slices.Clone(b), nil
}

func (f *fakeBackend) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}
