package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/sched"
)

// A policy file maps onto the trace's tenants by name; what the trace
// cannot follow is a warning.
// spec: BS-18
func TestCandidateFromPolicyFile(t *testing.T) {
	cur := &wtrace.Policy{Tenants: []wtrace.Tenant{{ID: 1, Name: "web", Weight: 1}, {ID: 2, Name: "ml", Weight: 1, Cap: 4}}, Production: []uint64{3}}
	p, err := admin.DecodePolicy("cand.toml", []byte(`version = 1
probe_limit = 8
[[headroom]]
pool = "linux"
cpus = 4
mem = "16G"
disk = "20G"
slots = 2
[tenants.web]
weight = 3
cap = 10
[tenants.newbie]
weight = 2
`))
	if err != nil {
		t.Fatal(err)
	}
	c, warn := Candidate(cur, p)
	if len(c.Tenants) != 2 || c.Tenants[0] != (wtrace.Tenant{ID: 1, Name: "web", Weight: 3, Cap: 10}) || c.Tenants[1].ID != 2 || c.Tenants[1].Cap != 0 {
		t.Fatalf("tenants %+v", c.Tenants)
	}
	if c.ProbeLimit != 8 || len(c.Headroom) != 1 || c.Headroom[0].Mem != 16<<30 || c.ClaimRenewals != 1 || len(c.Production) != 1 {
		t.Fatalf("candidate %+v", c)
	}
	all := strings.Join(warn, "\n")
	if !strings.Contains(all, `"newbie" is not in the trace`) || !strings.Contains(all, `"ml" is not in the candidate`) {
		t.Fatalf("warnings:\n%s", all)
	}
}

// A job handed out after GitLab held the request arrived at the answer
// (less the way back); one handed out at once, between its demand (or the
// runner's last empty answer) and the request reaching GitLab.
func TestArrivalEstimate(t *testing.T) {
	recs := []wtrace.Record{
		{T: 0, K: wtrace.KindRunner, Runner: 1, Tenant: 1, CPUs: 1, Mem: 1 << 30},
		{T: 0, K: wtrace.KindNode, Node: 1, CPUs: 8, Mem: 8 << 30, State: "ready"},
		// an empty answer after a 50 s hold: long poll 50 s, round trip 200 ms
		{T: 0, K: wtrace.KindDemand, Ticket: 1, Runner: 1}, {T: 0, K: wtrace.KindGrant, Ticket: 1, Adm: 1, Node: 1},
		{T: 1000, K: wtrace.KindAsk, Adm: 1}, {T: 51200, K: wtrace.KindAnswer, Adm: 1},
		// held: a job at 70 s
		{T: 51200, K: wtrace.KindDemand, Ticket: 2, Runner: 1}, {T: 51200, K: wtrace.KindGrant, Ticket: 2, Adm: 2, Node: 1},
		{T: 51300, K: wtrace.KindAsk, Adm: 2}, {T: 70000, K: wtrace.KindAnswer, Adm: 2, OK: true},
		{T: 70000, K: wtrace.KindSubmit, Job: 1, Runner: 1, Adm: 2}, {T: 70010, K: wtrace.KindStart, Job: 1, Node: 1},
		// at once: demand at 80 s, asked at 90 s
		{T: 80000, K: wtrace.KindDemand, Ticket: 3, Runner: 1}, {T: 89000, K: wtrace.KindGrant, Ticket: 3, Adm: 3, Node: 1},
		{T: 90000, K: wtrace.KindAsk, Adm: 3}, {T: 90200, K: wtrace.KindAnswer, Adm: 3, OK: true},
		{T: 90200, K: wtrace.KindSubmit, Job: 2, Runner: 1, Adm: 3}, {T: 90300, K: wtrace.KindStart, Job: 2, Node: 1},
		{T: 100000, K: wtrace.KindEnd, Job: 2, Wall: 9700, Reason: "finished"},
	}
	w, err := FromTrace(wtrace.Header{Version: 1}, recs)
	if err != nil {
		t.Fatal(err)
	}
	if w.LongPoll.Seconds() != 50 || w.RoundTrip.Milliseconds() != 200 {
		t.Fatalf("long poll %v, round trip %v", w.LongPoll, w.RoundTrip)
	}
	if len(w.Jobs) != 2 || w.Jobs[0].Arrive.Milliseconds() != 69900 || w.Jobs[1].Arrive.Milliseconds() != 85050 {
		t.Fatalf("jobs %+v", w.Jobs)
	}
	if !w.Jobs[0].Censored || w.Jobs[1].Runtime.Milliseconds() != 9700 || w.Asks != 3 || w.Empty != 1 {
		t.Fatalf("workload %+v", w)
	}
}

// A candidate's fair_drain_max_wait_secs, and a recorded policy's, reach
// the core the replay runs; left out, the core keeps its default.
// spec: BS-18
func TestReplayUsesFairDrainMaxWait(t *testing.T) {
	cur := &wtrace.Policy{Tenants: []wtrace.Tenant{{ID: 1, Name: "web", Weight: 1}}, FairDrainMaxWaitSecs: 120}
	var got sched.Policy
	recordedPolicy(cur)(&got)
	if got.FairDrainMaxWait != 2*time.Minute {
		t.Fatalf("recorded 120 s, the replay's core has %v", got.FairDrainMaxWait)
	}
	for _, tc := range []struct {
		file string
		want time.Duration
	}{{"", 0}, {"fair_drain_max_wait_secs = -1\n", -time.Second}, {"fair_drain_max_wait_secs = 600\n", 10 * time.Minute}} {
		p, err := admin.DecodePolicy("cand.toml", []byte("version = 1\n"+tc.file))
		if err != nil {
			t.Fatal(err)
		}
		c, _ := Candidate(cur, p)
		var got sched.Policy
		recordedPolicy(c)(&got)
		if got.FairDrainMaxWait != tc.want {
			t.Errorf("candidate %q: the replay's core has %v, want %v", tc.file, got.FairDrainMaxWait, tc.want)
		}
	}
}
