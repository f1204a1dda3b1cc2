package hub

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/pgtest"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// A leader stored a job (queued, its admission naming it) but died before
// storing the answer to its request_id, and its 201 never reached the
// relay. The new leader restores the job undecided and its admission out
// of the core; the relay repeats the submission it never heard answered.
// That repeat gets the job the first one made, not 404 for the admission
// (found by the HA soak: the relay failed the job, runner_system_failure)
// nor a second job: the node's held then adopts the job, which runs once.
//
// spec: BS-16, BS-17, API-42, API-43, DECISIONS 16
func TestTakeoverRepeatedSubmissionFindsUndecidedJob(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	schema := dsn[strings.LastIndex(dsn, "search_path=")+len("search_path="):]
	a, b, p, na, nb, ha, g := claimedOnLeader(t, dsn)
	ha.want(http.StatusNoContent, nil, "POST", "/v1/reservations/"+g.Admission+"/outcome", client.OutcomeRequest{Admission: g.Admission, Outcome: client.OutcomeJob})
	sub := client.JobSubmission{Runner: "r1", Admission: g.Admission, Reservation: g.Reservation, RequestID: client.NewRequestID(),
		Placement: testPlacement, PlaceWithinSecs: 300, Spec: testSpec(4343)}
	var v client.JobView
	ha.want(http.StatusCreated, &v, "POST", "/v1/jobs", sub)
	nextOf[dispatch.Start](t, na) // the node takes it; neither its answer nor the 201 arrive
	if err := a.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	// hub-a died before it stored the request_id's answer.
	srv.Exec(t, "postgres", "DELETE FROM "+schema+".vk_answers")
	waitLeading(t, b, 10*time.Second)
	p.relayOn(b)
	hb := p.at(b)
	var again client.JobView
	hb.want(http.StatusCreated, &again, "POST", "/v1/jobs", sub)
	if again.ID != v.ID {
		t.Fatalf("the repeated submission made job %s, want the first one's, %s", again.ID, v.ID)
	}
	nextOf[dispatch.Settings](t, nb)
	nb.node(haReport)
	nb.node(dispatch.Held{Jobs: []dispatch.HeldJob{{Job: v.ID}}})
	nextOf[dispatch.OutputAck](t, nb)
	var got client.JobView
	hb.want(http.StatusOK, &got, "GET", "/v1/jobs/"+v.ID, nil)
	if got.State != client.JobRunning || got.Node != p.node {
		t.Fatalf("after the held the job is %s on %q, want running on %s", got.State, got.Node, p.node)
	}
	// The repeat's answer is stored now: a third try reads the same job.
	hb.want(http.StatusCreated, &again, "POST", "/v1/jobs", sub)
	if again.ID != v.ID {
		t.Fatalf("a third submission answered job %s, want %s", again.ID, v.ID)
	}
}
