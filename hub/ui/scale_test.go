package ui

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/sched"
)

// manyNodes makes n nodes node-00000…, every third draining and in pool
// "gpu" with label "cuda".
func manyNodes(n int) []admin.Node {
	ns := make([]admin.Node, n)
	for i := range ns {
		ns[i] = admin.Node{ID: fmt.Sprintf("node-%05d", i), State: "ready", Pools: []string{"linux"}, Labels: []string{"docker"},
			Ceiling: admin.NoCeiling, MaxConcurrency: 8, Jobs: i % 8, Capacity: client.Envelope{CPUs: 16, Mem: 64 * client.GiB, Disk: 500 * client.GiB}, LastSeen: t0}
		if i%3 == 0 {
			ns[i].State, ns[i].Pools, ns[i].Labels = "draining", []string{"gpu"}, []string{"cuda"}
		}
	}
	return ns
}

func manyWaiting(n int) []Waiting {
	q := make([]Waiting, n)
	for i := range q {
		q[i] = Waiting{Kind: WaitTicket, ID: fmt.Sprintf("t-%05d", i), Tenant: fmt.Sprintf("tenant-%d", i%50), Class: "normal",
			Since: t0.Add(-3e9), Reason: sched.Reason{Code: sched.ReasonTenantCap, N: 20}.Text()}
	}
	return q
}

// The Fleet page lists a large fleet a page at a time, filtered by
// state, pool or a substring of ID, name or label; its summary counts
// the whole fleet.
// spec: OPS-01, OPS-02
func TestFleetFilterAndPaging(t *testing.T) {
	e := newEnv(t)
	e.be.nodes = manyNodes(450)
	for _, tc := range []struct {
		path      string
		status    int
		want      []string
		first     string
		notListed string
	}{
		{"/", 200, []string{"450 nodes", "Nodes 1–200 of 450.", `href="/?page=2"`}, "node-00000", "node-00200"},
		{"/?page=3", 200, []string{"Nodes 401–450 of 450.", `href="/?page=2"`}, "node-00400", "node-00399"},
		{"/?state=draining", 200, []string{"450 nodes", "Nodes 1–150 of 150 matching."}, "node-00000", "node-00001"},
		{"/?pool=gpu&page=1", 200, []string{"of 150 matching"}, "node-00003", "node-00004"},
		{"/?q=cuda", 200, []string{"of 150 matching"}, "node-00006", "node-00007"},
		{"/?q=node-0044", 200, []string{"Nodes 1–10 of 10 matching."}, "node-00440", "node-00450"},
		{"/?q=zzz", 200, []string{"No node matches."}, "", "node-00000"},
		{"/?page=0", 400, nil, "", ""},
	} {
		body, _ := e.get(tc.path, tc.status)
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s lacks %q", tc.path, w)
			}
		}
		if tc.first != "" && !strings.Contains(body, `href="/nodes/`+tc.first+`"`) {
			t.Errorf("GET %s does not list %s", tc.path, tc.first)
		}
		if tc.notListed != "" && strings.Contains(body, `href="/nodes/`+tc.notListed+`"`) {
			t.Errorf("GET %s lists %s", tc.path, tc.notListed)
		}
	}
}

// The Queue page lists the first QueueShown entries and counts all.
func TestQueueCapped(t *testing.T) {
	e := newEnv(t)
	e.be.queue = manyWaiting(QueueShown + 100)
	body, _ := e.get("/queue", http.StatusOK)
	for _, w := range []string{"600 waiting (the first 500 listed)", "600 waiting: tenant cap 20 reached", "t-00499"} {
		if !strings.Contains(body, w) {
			t.Errorf("queue page lacks %q", w)
		}
	}
	if strings.Contains(body, "t-00500") {
		t.Errorf("queue page lists beyond %d entries", QueueShown)
	}
}

func benchPage(b *testing.B, e *env, path string) {
	b.Helper()
	c := &http.Cookie{Name: sessionCookie, Value: fixedSession}
	var n int
	for b.Loop() {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "127.0.0.1:1"
		r.AddCookie(c)
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatalf("GET %s = %d", path, w.Code)
		}
		n = w.Body.Len()
	}
	b.ReportMetric(float64(n), "page-bytes")
}

// BenchmarkFleetPage renders one Fleet page (200 rows with forms) of a
// 30,000-node fleet, the spec's scale.
func BenchmarkFleetPage(b *testing.B) {
	e := newEnv(b)
	e.be.nodes = manyNodes(30000)
	benchPage(b, e, "/")
}

// BenchmarkQueuePage renders the Queue page with 10,000 waiting tickets
// (the spec's scale): 500 listed, all counted.
func BenchmarkQueuePage(b *testing.B) {
	e := newEnv(b)
	e.be.queue = manyWaiting(10000)
	benchPage(b, e, "/queue")
}
