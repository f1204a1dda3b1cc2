package testfleet

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/vk-ci/vk/hub/output"
)

// archive keeps a copy of every job output the hub drops at settle
// (API-41), so tests can compare GitLab's trace with what the node
// produced after the hub let go of it. It survives hub restarts: each new
// hub's output store is wrapped around the same archive.
type archive struct {
	mu   sync.Mutex
	outs map[string][]byte // hub job ID → the whole output at drop; guarded by mu
}

func newArchive() *archive { return &archive{outs: map[string][]byte{}} }

func (a *archive) get(job string) ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.outs[job]
	return b, ok
}

// keepingStore is an output.Store that reads a job's whole output into the
// archive before dropping it. Everything else passes through.
type keepingStore struct {
	output.Store
	a *archive
}

// Drop implements output.Store: archive, then drop.
func (k keepingStore) Drop(ctx context.Context, job string) error {
	var all []byte
	for off := int64(0); ; {
		c, err := k.Store.ReadAt(ctx, job, off, 0)
		if err != nil || len(c.Data) == 0 {
			break
		}
		all = append(all, c.Data...)
		off += int64(len(c.Data))
	}
	k.a.mu.Lock()
	if prev, ok := k.a.outs[job]; !ok || len(all) >= len(prev) {
		k.a.outs[job] = all
	}
	k.a.mu.Unlock()
	return k.Store.Drop(ctx, job)
}

// readAll reads a job's whole output from a live store.
func readAll(ctx context.Context, st output.Store, job string) ([]byte, error) {
	var all []byte
	for off := int64(0); ; {
		c, err := st.ReadAt(ctx, job, off, 0)
		if err != nil {
			return all, err
		}
		if len(c.Data) == 0 {
			return all, nil
		}
		all = append(all, c.Data...)
		off += int64(len(c.Data))
	}
}

// outputOver wraps a fresh output store of the hub's state dir so the
// fleet keeps each dropped output.
func outputOver(dir string, a *archive, log *slog.Logger) (output.Store, error) {
	d, err := output.Open(filepath.Join(dir, "output"), log)
	if err != nil {
		return nil, err
	}
	return keepingStore{Store: d, a: a}, nil
}
