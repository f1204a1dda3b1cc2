package testfleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/internal/need"
	"github.com/vk-ci/vk/internal/testfleet"
)

// The hand-off's marks, in the order a job passes them. Each is a moment
// one real component reached while handing the job from GitLab to a node
// and back to GitLab's commit.
const (
	markHanded    = iota // GitLab's 201 made the job running (the fake's state, seen by the tenant's watcher)
	markRecorded         // the hub's job record is durable (hub log "job submitted", after its store commit)
	markStart            // the hub sends the start frame (its BeforeStart hook on the driver's goroutine)
	markAccepted         // the node's journal holds the job (fsynced) and accepted is sent (node log "job accepted")
	markRunning          // the hub's running record is durable, so its view may show running (hub log "job running")
	markCommitted        // the relay's PUT state=running reached GitLab, sent once the relay saw the job running
	numMarks
)

// markNames name the steps that end at each mark (from the mark before).
var markNames = [numMarks]string{
	markRecorded:  "relay translates, submits; hub records (fsync)",
	markStart:     "hub: record → start frame",
	markAccepted:  "start frame → node journal fsync, accepted",
	markRunning:   "accepted → hub's running record durable",
	markCommitted: "running durable → relay's view → PUT at GitLab",
}

// handoffLog keeps the moments of the components' log lines that mark a
// job's hand-off, by hub or GitLab job ID. It is the fleet's log handler:
// the marks come from the real components, not from a model of them.
type handoffLog struct {
	mu        sync.Mutex
	recorded  map[string]time.Time // hub job ID →
	gitlabOf  map[string]int64     // hub job ID → GitLab job ID
	start     map[string]time.Time // hub job ID →
	accepted  map[string]time.Time // hub job ID →
	running   map[string]time.Time // hub job ID →
	submitted map[int64]time.Time  // GitLab job ID → the relay had the 201 of its submit and wrote its state
	committed map[int64]time.Time  // GitLab job ID → the relay had GitLab's answer to the commit
}

func newHandoffLog() *handoffLog {
	return &handoffLog{recorded: map[string]time.Time{}, gitlabOf: map[string]int64{}, start: map[string]time.Time{},
		accepted: map[string]time.Time{}, running: map[string]time.Time{}, submitted: map[int64]time.Time{}, committed: map[int64]time.Time{}}
}

// handoffHandler is a slog.Handler feeding a handoffLog; attrs holds
// those of With (groups are flattened: the marks' keys are top level).
type handoffHandler struct {
	l     *handoffLog
	attrs []slog.Attr
}

func (h handoffHandler) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }
func (h handoffHandler) WithGroup(string) slog.Handler                 { return h }
func (h handoffHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return handoffHandler{l: h.l, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h handoffHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "job submitted" && r.Message != "job accepted" && r.Message != "job running" && r.Message != "job committed in GitLab" {
		return nil
	}
	kv := map[string]slog.Value{}
	for _, a := range h.attrs {
		kv[a.Key] = a.Value
	}
	r.Attrs(func(a slog.Attr) bool { kv[a.Key] = a.Value; return true })
	comp, job := kv[logkey.Component].String(), kv[logkey.JobID].String()
	gl, _ := kv[logkey.GitLabJobID].Any().(int64)
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	switch {
	case comp == "hub" && r.Message == "job submitted":
		h.l.recorded[job], h.l.gitlabOf[job] = r.Time, gl
	case comp == "node" && r.Message == "job accepted":
		h.l.accepted[job] = r.Time
	case comp == "hub" && r.Message == "job running":
		h.l.running[job] = r.Time
	case comp == "relay" && r.Message == "job submitted":
		h.l.submitted[gl] = r.Time
	case comp == "relay":
		h.l.committed[gl] = r.Time
	}
	return nil
}

// beforeStart is the hub's BeforeStart hook: the start frame's moment.
func (l *handoffLog) beforeStart(job string) {
	now := time.Now()
	l.mu.Lock()
	l.start[job] = now
	l.mu.Unlock()
}

// BenchmarkHandoff traces each job's hand-off through the real fleet (one
// hub with bbolt, one relay, one node running jobs under bash, all in
// this process over TLS on loopback): b.N one-line jobs in one pipeline,
// a node with 8 slots and a runner with 4 request loops. For every job it
// takes the moments of the marks above from the components themselves
// (their log lines and the hub's BeforeStart hook, the fake GitLab's
// request log) and reports each step's p50 and its share of the summed
// hand-off (GitLab's 201 to the relay's PUT state=running reaching
// GitLab), plus the hand-off's p50 and p99, and the CPU the fleet and the
// jobs' processes used meanwhile. With TMPDIR on a tmpfs every state
// directory is there, fsyncs cost nothing, and the difference is the
// disk's share.
//
//	go test ./internal/testfleet -run XXX -bench Handoff -benchtime 200x
func BenchmarkHandoff(b *testing.B) {
	for _, bin := range []string{"git", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			need.Missingf(b, "%s not installed", bin)
		}
	}
	hl := newHandoffLog()
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	f, err := testfleet.Start(ctx, testfleet.Options{
		Dir:            b.TempDir(),
		Log:            slog.New(handoffHandler{l: hl}),
		Nodes:          []testfleet.NodeSpec{{CPUs: 8, Mem: 8 << 30}},
		HubBeforeStart: hl.beforeStart,
	})
	if err != nil {
		b.Fatalf("testfleet.Start: %v", err)
	}
	defer f.Close()
	tn := f.Tenants()[0]
	spec := gitlabfake.PipelineSpec{}
	for i := range b.N {
		spec.Jobs = append(spec.Jobs, gitlabfake.JobSpec{Name: fmt.Sprintf("j%d", i), Stage: "test", Script: []string{"true"}})
	}
	b.ResetTimer()
	cpu0, wall0 := cpuNow(b), time.Now()
	pl, err := tn.CreatePipeline("acme/handoff", readme, spec)
	if err != nil {
		b.Fatal(err)
	}
	got, err := tn.WaitFinished(ctx, pl)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpu := cpuNow(b).minus(cpu0)
	wall := time.Since(wall0)
	for name, st := range got {
		if st != gitlabfake.StateSuccess {
			b.Fatalf("%s = %s", name, st)
		}
	}
	steps, totals, relaySubmitted := hl.steps(tn, pl)
	if len(totals) < b.N {
		b.Fatalf("traced %d of %d jobs' hand-offs", len(totals), b.N)
	}
	reportSteps(b, steps, totals, relaySubmitted)
	// What shares the two cores with the hand-off: the fleet in this
	// process, and the jobs' own processes (their git and bash, and the
	// fake GitLab's git http-backend), which are its children.
	fmt.Printf("CPU over %v: this process (hub, relay, node, fake GitLab) %v, its children (the jobs' git and bash, the fake GitLab's git) %v\n",
		wall.Round(time.Millisecond), cpu.self.Round(time.Millisecond), cpu.children.Round(time.Millisecond))
	b.ReportMetric(cpu.self.Seconds()*1e3/float64(b.N), "fleet-cpu-ms/job")
	b.ReportMetric(cpu.children.Seconds()*1e3/float64(b.N), "children-cpu-ms/job")
}

// cpuTimes is the CPU (user and system) this process and its waited-for
// children have used.
type cpuTimes struct{ self, children time.Duration }

func (c cpuTimes) minus(o cpuTimes) cpuTimes {
	return cpuTimes{c.self - o.self, c.children - o.children}
}

// cpuNow reads getrusage(2) for the process and for its children.
func cpuNow(b *testing.B) cpuTimes {
	var self, kids syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids); err != nil {
		b.Fatal(err)
	}
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return cpuTimes{tv(self.Utime) + tv(self.Stime), tv(kids.Utime) + tv(kids.Stime)}
}

// steps returns, per step (the mark it ends at), each traced job's time
// in it, and each job's whole hand-off.
func (l *handoffLog) steps(tn *testfleet.Tenant, pl gitlabfake.Pipeline) (steps [numMarks][]time.Duration, totals, relaySubmitted []time.Duration) {
	puts := map[int64]time.Time{}
	for _, r := range tn.GitLab.RequestsTo(gitlabfake.RouteUpdateJob) {
		var body struct {
			State string `json:"state"`
		}
		var id int64
		if _, err := fmt.Sscanf(r.Path, "/api/v4/jobs/%d", &id); err != nil || json.Unmarshal(r.Body, &body) != nil || body.State != "running" {
			continue
		}
		if _, seen := puts[id]; !seen {
			puts[id] = r.At
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	hubOf := map[int64]string{}
	for hubID, gl := range l.gitlabOf {
		hubOf[gl] = hubID
	}
	for _, gl := range pl.Jobs {
		hubID := hubOf[gl]
		var at [numMarks]time.Time
		at[markHanded], at[markRecorded], at[markStart] = tn.FirstAt(gl, gitlabfake.StateRunning), l.recorded[hubID], l.start[hubID]
		at[markAccepted], at[markRunning], at[markCommitted] = l.accepted[hubID], l.running[hubID], puts[gl]
		if slices.ContainsFunc(at[:], time.Time.IsZero) {
			continue
		}
		for m := markRecorded; m < numMarks; m++ {
			steps[m] = append(steps[m], at[m].Sub(at[m-1]))
		}
		totals = append(totals, at[markCommitted].Sub(at[markHanded]))
		if t := l.submitted[gl]; !t.IsZero() {
			relaySubmitted = append(relaySubmitted, t.Sub(at[markHanded]))
		}
	}
	return steps, totals, relaySubmitted
}

// reportSteps prints the steps' table and reports their p50s as metrics.
// relaySubmitted is, per job, when the relay had its submit's 201 and
// had written its state (from GitLab's 201): it runs alongside the hub's
// start, so it is no step of its own.
func reportSteps(b *testing.B, steps [numMarks][]time.Duration, totals, relaySubmitted []time.Duration) {
	var sum time.Duration
	for _, d := range totals {
		sum += d
	}
	var t strings.Builder
	fmt.Fprintf(&t, "hand-off of %d jobs: p50 %v, p99 %v\n", len(totals), q(totals, 0.5), q(totals, 0.99))
	fmt.Fprintf(&t, "%-48s %9s %9s %6s\n", "step", "p50", "p99", "share")
	for m := markRecorded; m < numMarks; m++ {
		var in time.Duration
		for _, d := range steps[m] {
			in += d
		}
		fmt.Fprintf(&t, "%-48s %9v %9v %5.1f%%\n", markNames[m], q(steps[m], 0.5), q(steps[m], 0.99), 100*float64(in)/float64(sum))
		b.ReportMetric(q(steps[m], 0.5).Seconds()*1e3, fmt.Sprintf("step%d-p50-ms", m))
	}
	fmt.Fprintf(&t, "(the relay had the submit's 201 and its state written %v after GitLab's 201, p50)\n", q(relaySubmitted, 0.5))
	fmt.Print(t.String()) // b.Log would cut it short (a benchmark's log is truncated)
	b.ReportMetric(q(totals, 0.5).Seconds()*1e3, "handoff-p50-ms")
	b.ReportMetric(q(totals, 0.99).Seconds()*1e3, "handoff-p99-ms")
}

// q is the p-quantile of ds (which it sorts), rounded to 10 µs.
func q(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(10 * time.Microsecond)
}
