package node

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/proto/dispatch"
)

const netDevSample = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  123456     100    0    0    0     0          0         0   123456     100    0    0    0     0       0          0
  eth0: 7340032    5000    0    0    0     0          0         0  1048576    3000    0    0    0     0       0          0
 veth1:     100       1    0    0    0     0          0         0       50       1    0    0    0     0       0          0
`

// spec: NSESS-17
func TestParseNetDev(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		tx, rx int64
		bad    bool
	}{
		{"loopback is not egress", netDevSample, 1048576 + 50, 7340032 + 100, false},
		{"only lo", "h\nh\n    lo: 5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\n", 0, 0, false},
		{"no header", "", 0, 0, true},
		{"short line", "h\nh\n eth0: 1 2 3\n", 0, 0, true},
		{"no colon", "h\nh\n eth0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", 0, 0, true},
		{"negative", "h\nh\n eth0: -1 0 0 0 0 0 0 0 5 0 0 0 0 0 0 0\n", 0, 0, true},
	}
	for _, tc := range tests {
		tx, rx, err := ParseNetDev([]byte(tc.in))
		if (err != nil) != tc.bad || tx != tc.tx || rx != tc.rx {
			t.Errorf("%s: ParseNetDev = %d, %d, %v; want %d, %d, bad %v", tc.name, tx, rx, err, tc.tx, tc.rx, tc.bad)
		}
	}
}

// ParseNetDev never panics and never returns negative counters.
func FuzzParseNetDev(f *testing.F) {
	f.Add([]byte(netDevSample))
	f.Add([]byte("h\nh\n eth0: 9223372036854775807 0 0 0 0 0 0 0 9223372036854775807 0 0 0 0 0 0 0\n eth1: 9223372036854775807 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n"))
	f.Add([]byte("h\nh\n:\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tx, rx, err := ParseNetDev(b)
		if err == nil && (tx < 0 || rx < 0) {
			t.Fatalf("negative counters %d %d", tx, rx)
		}
	})
}

// egressJob runs a job measured by a fake counter under a fake clock,
// blocking in its script until release is called.
type egressJob struct {
	h       *testHub
	a       *Agent
	fake    *clock.Fake
	tx      atomic.Int64
	samples chan bool
	gate    string
}

func startEgressJob(t *testing.T, versions dispatch.Range) *egressJob {
	t.Helper()
	e := &egressJob{fake: clock.NewFake(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)), samples: make(chan bool, 64),
		gate: filepath.Join(t.TempDir(), "go")}
	e.h = startHubVersions(t, versions)
	e.a = startAgent(t, e.h, testConfig(t, t.TempDir()), Options{
		Clock: e.fake,
		egressSource: func(string) egressSource {
			return func() (int64, int64, bool) { v := e.tx.Load(); return v, v / 2, true }
		},
		egressSampled: func(_ string, sent bool) { e.samples <- sent },
	})
	waitFor[*dispatch.Held](e.h, 0, nil)
	return e
}

func (e *egressJob) drain() {
	for {
		select {
		case <-e.samples:
		default:
			return
		}
	}
}

func (e *egressJob) nextSample(t *testing.T) bool {
	t.Helper()
	select {
	case s := <-e.samples:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no egress sample in 30 s")
		return false
	}
}

// A running job's egress is sampled at stage starts and every 5 s, not
// within 2 s of the last sample, sent only when it changed, each change a
// higher revision; the result carries the last and highest (NSESS-19).
//
// spec: NSESS-17, NSESS-19, NSESS-20
func TestEgressFramesAndResult(t *testing.T) {
	e := startEgressJob(t, dispatch.Range{})
	h := e.h
	e.tx.Store(100)
	from := h.mark()
	startJob(t, h, "job-e", "r1", "while [ ! -e "+e.gate+" ]; do sleep 0.02; done")
	first, _ := waitFor(h, from, func(m *dispatch.Egress) bool { return m.Job == "job-e" })
	if first.Report.Revision != 1 || first.Report.TxBytes != 100 || first.Report.RxBytes != 50 {
		t.Errorf("first egress = %+v, want revision 1, tx 100, rx 50", first.Report)
	}
	waitFor(h, from, func(u *dispatch.JobUpdate) bool { return u.Job == "job-e" && u.Stage == "step_script" })

	// Stage starts at the same instant were not sampled (2 s gap); the
	// 5 s timer samples the change.
	e.drain()
	e.tx.Store(250)
	e.fake.Advance(EgressEvery)
	if !e.nextSample(t) {
		t.Fatal("a changed counter after 5 s was not sent")
	}
	second, _ := waitFor(h, from, func(m *dispatch.Egress) bool { return m.Report.Revision == 2 })
	if second.Report.TxBytes != 250 {
		t.Errorf("second egress = %+v, want tx 250", second.Report)
	}
	// Unchanged: sampled, not sent.
	e.fake.Advance(EgressEvery)
	if e.nextSample(t) {
		t.Error("an unchanged counter was sent")
	}

	// The job ends: after_script's stage start samples the last change.
	e.tx.Store(300)
	e.fake.Advance(EgressMinGap)
	if err := os.WriteFile(e.gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := resultOf(h, from, "job-e")
	if res.Result.Failure != "" {
		t.Fatalf("job failed: %+v", res.Result)
	}
	if res.Egress == nil || res.Egress.Revision != 3 || res.Egress.TxBytes != 300 || res.Egress.RxBytes != 150 {
		t.Errorf("result egress = %+v, want revision 3, tx 300", res.Egress)
	}
	var revs []uint64
	h.mu.Lock()
	for _, m := range h.log[from:] {
		if eg, ok := m.(*dispatch.Egress); ok {
			revs = append(revs, eg.Report.Revision)
		}
	}
	h.mu.Unlock()
	for i := range revs {
		if revs[i] != uint64(i+1) {
			t.Errorf("egress revisions %v, want 1, 2, 3 (each change once)", revs)
			break
		}
	}
	if len(revs) == 0 || revs[len(revs)-1] > res.Egress.Revision {
		t.Errorf("a frame's revision %v beyond the result's %d", revs, res.Egress.Revision)
	}
}

// Below version 6 no egress frame is sent; the result still carries the
// report.
//
// spec: NSESS-20
func TestEgressOldSessionResultOnly(t *testing.T) {
	e := startEgressJob(t, dispatch.Range{Min: dispatch.VersionJobs, Max: dispatch.VersionEgress - 1})
	h := e.h
	e.tx.Store(4096)
	from := h.mark()
	startJob(t, h, "job-old", "r1", "echo old")
	if e.nextSample(t) {
		t.Error("the first sample was sent on a version 5 session")
	}
	res := resultOf(h, from, "job-old")
	if res.Egress == nil || res.Egress.TxBytes != 4096 || res.Egress.Revision != 1 {
		t.Errorf("result egress = %+v, want revision 1, tx 4096", res.Egress)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.log {
		if _, ok := m.(*dispatch.Egress); ok {
			t.Errorf("egress frame on a version 5 session: %+v", m)
		}
	}
}

func BenchmarkParseNetDev(b *testing.B) {
	in := []byte(netDevSample)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, _, err := ParseNetDev(in); err != nil {
			b.Fatal(err)
		}
	}
}
