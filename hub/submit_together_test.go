package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/boltstore"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// holdLoop keeps the driver's loop busy from the moment it takes it
// (entered closed) until release is closed.
type holdLoop struct{ entered, release chan struct{} }

func (r holdLoop) run(*Driver) {
	close(r.entered)
	<-r.release
}

// togetherWatch is the hub's real store, holding each new job's write
// until open is closed, and counting the writes under way at once.
// A driver that wrote the records one after another would never have two
// under way: the first would wait for the others, which wait for it.
type togetherWatch struct {
	store.Store
	open   chan struct{} // closed by let: the held writes go on
	once   sync.Once
	mu     sync.Mutex
	cond   *sync.Cond
	inside int // writes under way; guarded by mu
	most   int // the most at once; guarded by mu
}

func newTogetherWatch() *togetherWatch {
	w := &togetherWatch{open: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	return w
}

func (w *togetherWatch) CreateJobAnswered(ctx context.Context, j store.Job, a store.Answer) error {
	w.mu.Lock()
	w.inside++
	w.most = max(w.most, w.inside)
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.open
	err := w.Store.CreateJobAnswered(ctx, j, a)
	w.mu.Lock()
	w.inside--
	w.mu.Unlock()
	return err
}

// let lets the held writes go on. Idempotent.
func (w *togetherWatch) let() { w.once.Do(func() { close(w.open) }) }

// Gather passes the hub's gathering on to the bbolt store beneath, so the
// writes commit as they would without the watch.
func (w *togetherWatch) Gather(n int) *boltstore.Gathering {
	return w.Store.(gatherer).Gather(n)
}

// waitInside waits until n writes are under way at once, failing after
// a bound that only a broken hub reaches.
func (w *togetherWatch) waitInside(t *testing.T, n int) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		w.mu.Lock()
		for w.inside < n {
			w.cond.Wait()
		}
		w.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		w.mu.Lock()
		inside := w.inside
		w.mu.Unlock()
		w.let() // the hub can stop
		t.Fatalf("%d job record writes under way at once, want %d: the submissions were not written together", inside, n)
	}
}

// Submissions that reach the driver while it is busy are carried out
// together: their jobs' records are written at once (one bbolt commit,
// where they were one commit after another, each holding up the whole
// driver), and still nothing of any of them leaves the hub, neither its
// 201 nor its start frame, before its record is durable (DECISIONS 16).
//
// spec: API-07, API-42
func TestSubmissionsWaitingAreWrittenTogether(t *testing.T) {
	const n = 3
	h := newHarness(t)
	watch := newTogetherWatch()
	h.wrapStore = func(st store.Store) store.Store { watch.Store = st; return watch }
	h.restart()
	t.Cleanup(watch.let)
	h.relayUp(n)
	h.nodeUp(dispatch.Held{})
	var subs []client.JobSubmission
	for i := range n {
		g := h.claimed()
		h.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
		subs = append(subs, submission(g, int64(100+i)))
	}
	d := h.srv.Driver()
	hold := holdLoop{entered: make(chan struct{}), release: make(chan struct{})}
	held := make(chan error, 1)
	go func() { held <- d.ask(t.Context(), hold) }()
	<-hold.entered

	type answer struct {
		code int
		body []byte
		err  error
	}
	answers := make(chan answer, n)
	for _, s := range subs {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			req, err := http.NewRequestWithContext(t.Context(), "POST", h.srv.URL()+"/v1/jobs", bytes.NewReader(b))
			if err != nil {
				answers <- answer{err: err}
				return
			}
			resp, err := h.hc.Do(req)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			var body bytes.Buffer
			body.ReadFrom(resp.Body)
			answers <- answer{code: resp.StatusCode, body: body.Bytes()}
		}()
	}
	// Every submission is at the loop's door before the loop goes on.
	deadline := time.Now().Add(10 * time.Second)
	for d.waiting.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d submissions waiting for the driver, want %d", d.waiting.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	close(hold.release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}

	watch.waitInside(t, n)
	// The records are being written: no start frame and no answer yet.
	h.noFrame()
	select {
	case a := <-answers:
		t.Fatalf("a submission was answered (%d %s, %v) before its record was durable", a.code, a.body, a.err)
	default:
	}
	watch.let()

	ids := map[string]bool{}
	for range n {
		a := <-answers
		if a.err != nil || a.code != http.StatusCreated {
			t.Fatalf("submission answered %d %s (%v), want 201", a.code, a.body, a.err)
		}
		var v client.JobView
		if err := json.Unmarshal(a.body, &v); err != nil {
			t.Fatal(err)
		}
		ids[v.ID] = true
		rec, err := watch.Store.GetJob(t.Context(), v.ID)
		if err != nil {
			t.Fatalf("job %s answered 201 but not stored: %v", v.ID, err)
		}
		if rec.State != store.JobStarting {
			t.Errorf("job %s stored %s, want starting (the core started it at once)", v.ID, rec.State)
		}
	}
	for range n {
		s := expectFrame[dispatch.Start](h)
		if !ids[s.Job] {
			t.Errorf("start frame for %s, not one of the jobs answered %v", s.Job, ids)
		}
		delete(ids, s.Job)
	}
	h.noFrame()
	watch.mu.Lock()
	most := watch.most
	watch.mu.Unlock()
	if most != n {
		t.Errorf("at most %d writes under way at once, want %d", most, n)
	}
}
