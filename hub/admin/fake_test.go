package admin

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/vk-ci/vk/hub/store"
)

// fakeBackend is an in-memory Backend recording what the socket asked.
type fakeBackend struct {
	mu        sync.Mutex
	nodes     map[string]*Node
	policy    Policy
	removed   []string
	approvals []store.Approval
	queue     []Waiting
}

func (b *fakeBackend) Queue(context.Context) ([]Waiting, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.queue), nil
}

func (b *fakeBackend) Nodes(context.Context) ([]Node, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Node
	for _, n := range b.nodes {
		out = append(out, *n)
	}
	return out, nil
}

func (b *fakeBackend) node(id string) (*Node, error) {
	n, ok := b.nodes[id]
	if !ok {
		return nil, fmt.Errorf("%w: node %q", ErrNotFound, id)
	}
	return n, nil
}

func (b *fakeBackend) SetPools(_ context.Context, id string, pools []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.node(id)
	if err == nil {
		n.Pools = slices.Clone(pools)
	}
	return err
}

func (b *fakeBackend) SetCeiling(_ context.Context, id string, c int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.node(id)
	if err == nil {
		n.Ceiling = c
	}
	return err
}

func (b *fakeBackend) Drain(_ context.Context, id string, on bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.node(id)
	if err == nil {
		n.State = "ready"
		if on {
			n.State = "draining"
		}
	}
	return err
}

func (b *fakeBackend) Policy(context.Context) (Policy, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.policy, nil
}

func (b *fakeBackend) SetPolicy(_ context.Context, p Policy) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.policy = p
	return nil
}

func (b *fakeBackend) RelayRemoved(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.removed = append(b.removed, id)
	return nil
}

func (b *fakeBackend) NodeRemoved(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.nodes, id)
	b.removed = append(b.removed, id)
	return nil
}

func (b *fakeBackend) ApprovalChanged(_ context.Context, a store.Approval) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.approvals = append(b.approvals, a)
	return nil
}
