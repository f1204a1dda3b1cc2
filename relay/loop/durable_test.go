package loop

import (
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/relay/state"
)

// heldWrite is the runner's real state file with the write of the first
// submitted record held in flight until release is closed, as a slow disk
// would hold it. waiting is closed when the relay first waits for that
// write.
type heldWrite struct {
	store   *state.Store
	release chan struct{}
	waiting chan struct{}
	once    sync.Once
	mu      sync.Mutex
	held    bool // guarded by mu
}

func (h *heldWrite) begin(j state.Job) durable {
	h.mu.Lock()
	first := j.Phase == state.PhaseSubmitted && !h.held
	h.held = h.held || first
	h.mu.Unlock()
	if !first {
		return h.store.Begin(j)
	}
	w := &gatedWrite{h: h, done: make(chan struct{})}
	go func() {
		<-h.release
		w.err = h.store.Begin(j).Wait()
		close(w.done)
	}()
	return w
}

// gatedWrite is the held write.
type gatedWrite struct {
	h    *heldWrite
	done chan struct{}
	err  error
}

func (w *gatedWrite) Done() <-chan struct{} {
	w.h.once.Do(func() { close(w.h.waiting) })
	return w.done
}

func (w *gatedWrite) Err() error { return w.err }

// The relay follows a job from its submission's answer while the state
// file's write of the submitted record is still under way: it sees the
// node's acceptance (the hub's view running) with the write held. But
// nothing of the job reaches GitLab, the commit (PUT state=running)
// first, until the write is done: a relay that crashed after the commit
// must find the job in its state file.
//
// spec: RELAY-07, RELAY-09, GL-08
func TestCommitWaitsForTheSubmittedRecord(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := e.manager(1, 1)
	h := &heldWrite{store: e.store, release: make(chan struct{}), waiting: make(chan struct{})}
	m.rs[0].begin = h.begin
	glID := e.pipeline([]string{e.waitLine("go")})
	e.gate.Set(true)
	e.run(m)
	id := e.hub.OnlyJob(t)
	e.hub.WaitFor(t, "the relay seeing the job running while its record's write is held", func() bool {
		return e.hub.Views[id].State == client.JobRunning
	})
	deadline := time.After(60 * time.Second)
	for waiting := false; !waiting; {
		ch := e.gl.Changed()
		ji, err := e.gl.Job(glID)
		if err != nil {
			t.Fatal(err)
		}
		if committed(ji) || len(ji.Patches) > 0 {
			t.Fatalf("GitLab heard of the job (updates %+v, %d patches) before the state file held its submitted record", ji.Updates, len(ji.Patches))
		}
		select {
		case <-h.waiting:
			waiting = true
		case <-ch:
		case <-deadline:
			t.Fatal("the relay neither committed the job nor waited for its record's write")
		}
	}
	// The commit waits on the write: still nothing at GitLab.
	if ji, _ := e.gl.Job(glID); committed(ji) || len(ji.Patches) > 0 {
		t.Fatalf("GitLab heard of the job (updates %+v) before the state file held it", ji.Updates)
	}
	close(h.release)
	e.release("go")
	ji := e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	if !committed(ji) {
		t.Fatalf("the job succeeded without a commit: %+v", ji.Updates)
	}
	e.settled(id)
}
