package hub

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/internal/pgtest"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// failFirstComplete is an output store whose first MarkComplete fails
// (as one does while PostgreSQL restarts) without marking anything; failed
// is closed once it did.
type failFirstComplete struct {
	output.Store
	failed chan struct{}
}

func (f *failFirstComplete) MarkComplete(ctx context.Context, job string) error {
	select {
	case <-f.failed:
		return f.Store.MarkComplete(ctx, job)
	default:
		close(f.failed)
		return errors.New("injected: the output store is unreachable")
	}
}

// A finished job whose result's writes failed (the output's completeness
// here, as when PostgreSQL restarts under the leader) is not answered
// recorded; the node's held on its next session lists the job, and the
// hub writes the result again and answers recorded only once it is
// durable: when recorded comes, the output reads complete. Answering the
// held from memory told the node to forget a result the store did not
// have, and the relay waited for the rest of the output for ever (found
// by the HA soak).
//
// spec: NSESS-10, NSESS-24
func TestRecordedFromHeldOnlyOnceDurable(t *testing.T) {
	fail := &failFirstComplete{failed: make(chan struct{})}
	r := startStoreFailRun(t, func(o output.Store) output.Store { fail.Store = o; return fail }, 78)
	h, nd, v := r.h, r.nd, r.job
	runToEnd(t, nd, v.ID, "hello\n")
	select {
	case <-fail.failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the hub never marked the output complete")
	}
	nd.c.CloseNow() // the node's session is lost before any recorded

	nd = r.session(t, false, dispatch.Held{Jobs: []dispatch.HeldJob{{Job: v.ID}}})
	if ack := nextOf[dispatch.OutputAck](t, nd); ack.Offset != 6 {
		t.Fatalf("ack after the held = %+v, want offset 6", ack)
	}
	if rec := nextOf[dispatch.Recorded](t, nd); rec.Job != v.ID {
		t.Fatalf("recorded = %+v, want %s", rec, v.ID)
	}
	code, body, hdr := h.call("GET", "/v1/jobs/"+v.ID+"/output?offset=0", nil)
	if code != http.StatusOK || string(body) != "hello\n" || hdr.Get(client.HeaderOutputComplete) != "true" {
		t.Fatalf("output when recorded came = %d %q complete=%s, want the whole output, complete", code, body,
			hdr.Get(client.HeaderOutputComplete))
	}
}

// A leader that died between storing a job's result and its output's
// completeness (two writes) leaves a finished job whose output never
// completes. A new leader that restores it finished marks its output
// complete, so its readers stop waiting for more (found by the HA soak:
// a job stuck running in GitLab).
//
// spec: BS-16, BS-17, DECISIONS 16
func TestTakeoverCompletesFinishedOutput(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	a, b, _, na, nb, ha, g := claimedOnLeader(t, dsn)
	v := ha.submitOn(g, 4343)
	startAccepted(t, na, v.ID)
	runToEnd(t, na, v.ID, "all of it\n")
	if rec := nextOf[dispatch.Recorded](t, na); rec.Job != v.ID {
		t.Fatalf("recorded = %+v, want %s", rec, v.ID)
	}
	// The completeness write is undone, as if the leader had died before
	// it: the record says finished, the output is not complete.
	db, err := pgstore.Open(t.Context(), dsn, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if tag, err := db.Pool().Exec(t.Context(), "UPDATE vk_output SET complete = false WHERE job = $1", v.ID); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("undoing the completeness: %v (%v rows)", err, tag.RowsAffected())
	}
	if err := a.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitLeading(t, b, 10*time.Second)
	nextOf[dispatch.Settings](t, nb)
	nb.node(haReport)
	nb.node(dispatch.Held{})
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, complete, err := b.OutputStore().Len(t.Context(), v.ID)
		if err == nil && complete && n == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new leader's output of %s: %d bytes, complete %v, err %v; want 10, complete", v.ID, n, complete, err)
		}
		time.Sleep(10 * time.Millisecond) // polling the database for a write of the new leader's writer
	}
}
