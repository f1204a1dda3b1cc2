package node

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/node/journal"
	"github.com/vk-ci/vk/node/ledger"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// spec: NSESS-11, NSESS-24, XFER-17, PLACE-04
func TestReportThenHeldOnConnect(t *testing.T) {
	h, _ := connected(t, func(c *Config) { c.Executor.Schedule.MaxConcurrency = 3 }, Options{})
	rep, ri := waitFor[*dispatch.Report](h, 0, nil)
	_, hi := waitFor[*dispatch.Held](h, 0, nil)
	if ri > hi {
		t.Errorf("held (frame %d) before report (frame %d)", hi, ri)
	}
	if rep.Registry != "https://registry.example.com" || rep.MaxConcurrency != 3 || rep.LocalRunner ||
		rep.Resources.CPUs != 4 || rep.Resources.Mem != 8*client.GiB || len(rep.Labels) != 1 {
		t.Errorf("report = %+v", rep)
	}
}

// spec: NODE-01, NSESS-12, NSESS-21, NODE-05, PLACE-06, PLACE-08, PLACE-10
func TestOfferReplies(t *testing.T) {
	big := func(mem, disk client.Size, cpus int) client.Envelope {
		return client.Envelope{Mem: mem, Disk: disk, CPUs: cpus}
	}
	tests := []struct {
		name   string
		mod    func(*Config)
		before func(h *testHub, a *Agent)
		env    client.Envelope
		detect bool                   // a local runner is detected
		want   dispatch.RefusalReason // "" = accepted
	}{
		{name: "fits", env: env1},
		{name: "memory", env: big(9*client.GiB, client.GiB, 1), want: dispatch.RefusalMemory},
		{name: "disk", env: big(client.GiB, 21*client.GiB, 1), want: dispatch.RefusalDisk},
		{name: "cpus", env: big(client.GiB, client.GiB, 5), want: dispatch.RefusalCPUs},
		{name: "not_ready when draining", env: env1, want: dispatch.RefusalNotReady,
			before: func(_ *testHub, a *Agent) { a.SetState(ledger.StateDraining) }},
		{name: "runner when a local runner is configured", env: env1, want: dispatch.RefusalRunner,
			mod: func(c *Config) { c.Node.Runner = RunnerLocal }},
		{name: "runner when unset and one is detected", env: env1, want: dispatch.RefusalRunner,
			mod: func(c *Config) { c.Node.Runner = RunnerUnset }, detect: true},
		{name: "none overrides detection", env: env1, detect: true},
		{name: "concurrency at max_concurrency", env: env1, want: dispatch.RefusalConcurrency,
			mod:    func(c *Config) { c.Executor.Schedule.MaxConcurrency = 1 },
			before: holdOne},
		{name: "ceiling as the hub set it", env: env1, want: dispatch.RefusalCeiling,
			before: func(h *testHub, a *Agent) {
				h.send(&dispatch.Settings{Ceiling: 1})
				holdOne(h, a)
			}},
		{name: "ceiling cleared", env: env1,
			before: func(h *testHub, a *Agent) {
				h.send(&dispatch.Settings{Ceiling: 1})
				h.send(&dispatch.Settings{})
				holdOne(h, a)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, a := connected(t, tt.mod, Options{DetectRunner: func() bool { return tt.detect }})
			if tt.before != nil {
				tt.before(h, a)
			}
			from := h.mark()
			h.send(&dispatch.Offer{Reservation: "r-test", Envelope: tt.env, LeaseSecs: 90})
			rep, _ := waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == "r-test" })
			switch {
			case tt.want == "" && rep.Reply != dispatch.ReplyAccepted:
				t.Errorf("offer_reply = %+v, want accepted", rep)
			case tt.want == "" && rep.LeaseSecs != 90:
				t.Errorf("offer_reply lease = %d, want 90", rep.LeaseSecs)
			case tt.want != "" && (rep.Reply != dispatch.ReplyRefused || rep.Reason != tt.want):
				t.Errorf("offer_reply = %+v, want refused %s", rep, tt.want)
			}
		})
	}
}

// holdOne makes the node hold one reservation, r-first.
func holdOne(h *testHub, _ *Agent) {
	h.t.Helper()
	from := h.mark()
	h.send(&dispatch.Offer{Reservation: "r-first", Envelope: env1, LeaseSecs: 90})
	rep, _ := waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == "r-first" })
	if rep.Reply != dispatch.ReplyAccepted {
		h.t.Fatalf("first offer: %+v", rep)
	}
}

// spec: NSESS-05, NSESS-06, NSESS-13, NODE-03, NODE-04
func TestLeaseRenewReleaseExpire(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	armed := make(chan time.Duration, 64)
	h, a := connected(t, nil, Options{Clock: fake, leaseArmed: func(at time.Duration) { armed <- at }})
	from := h.mark()
	h.send(&dispatch.Offer{Reservation: "r1", Envelope: env1, LeaseSecs: 900})
	rep, _ := waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == "r1" })
	if rep.Reply != dispatch.ReplyAccepted || rep.LeaseSecs != dispatch.MaxLeaseSecs {
		t.Fatalf("offer_reply = %+v, want accepted with the lease clamped to 600 s", rep)
	}
	fake.Advance(100 * time.Second)
	h.send(&dispatch.Renew{Reservation: "r1", LeaseSecs: 30})
	l, _ := waitFor(h, from, func(l *dispatch.Lease) bool { return l.Reservation == "r1" })
	if l.State != dispatch.LeaseHeld || l.RemainingSecs != 30 {
		t.Errorf("renew answered %+v, want held 30", l)
	}
	h.send(&dispatch.Release{Reservation: "r1"})
	l, _ = waitFor(h, from, func(l *dispatch.Lease) bool { return l.Reservation == "r1" && l.State == dispatch.LeaseGone })
	if l.Why != dispatch.GoneReleased {
		t.Errorf("release answered %+v, want gone released", l)
	}
	h.send(&dispatch.Renew{Reservation: "nope", LeaseSecs: 30})
	l, _ = waitFor(h, from, func(l *dispatch.Lease) bool { return l.Reservation == "nope" })
	if l.State != dispatch.LeaseGone || l.Why != dispatch.GoneUnknown {
		t.Errorf("renew of an unknown reservation answered %+v, want gone unknown", l)
	}

	// Expiry on the node's monotonic clock (NODE-03): held before the lease
	// ends, gone expired, unasked, once it has.
	h.send(&dispatch.Offer{Reservation: "r2", Envelope: env1, LeaseSecs: 5})
	waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == "r2" })
	for at := time.Duration(0); at != 105*time.Second; { // 100 s + 5 s lease
		select {
		case at = <-armed:
		case <-time.After(30 * time.Second):
			t.Fatal("lease timer not armed for r2")
		}
	}
	fake.Advance(4 * time.Second)
	mid := h.mark()
	h.send(&dispatch.Renew{Reservation: "r2", LeaseSecs: 0}) // a report only: 1 s left
	l, _ = waitFor(h, mid, func(l *dispatch.Lease) bool { return l.Reservation == "r2" })
	if l.State != dispatch.LeaseHeld || l.RemainingSecs != 1 {
		t.Errorf("lease after 4 of 5 s = %+v, want held 1", l)
	}
	fake.Advance(2 * time.Second)
	l, _ = waitFor(h, mid, func(l *dispatch.Lease) bool { return l.Reservation == "r2" && l.State == dispatch.LeaseGone })
	if l.Why != dispatch.GoneExpired {
		t.Errorf("lease = %+v, want gone expired", l)
	}
	a.mu.Lock()
	s := a.led.Snapshot(a.now())
	a.mu.Unlock()
	if len(s.Reservations) != 0 || s.Used != (ledger.Envelope{}) {
		t.Errorf("ledger after expiry = %+v, want empty", s)
	}
}

// startJob offers reservation res (unless "") and starts job id on it.
func startJob(t *testing.T, h *testHub, id, res string, script ...string) {
	t.Helper()
	if res != "" {
		from := h.mark()
		h.send(&dispatch.Offer{Reservation: res, Envelope: env1, LeaseSecs: 90})
		rep, _ := waitFor(h, from, func(r *dispatch.OfferReply) bool { return r.Reservation == res })
		if rep.Reply != dispatch.ReplyAccepted {
			t.Fatalf("offer: %+v", rep)
		}
	}
	h.send(&dispatch.Start{Job: id, Reservation: res, Envelope: env1, Spec: testSpec(script...)})
}

func resultOf(h *testHub, from int, id string) *dispatch.Result {
	h.t.Helper()
	r, _ := waitFor(h, from, func(r *dispatch.Result) bool { return r.Job == id })
	return r
}

func waitJobs(t *testing.T, a *Agent, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if !a.waitJobs(ctx, cond) {
		t.Fatal("timed out waiting for the agent's jobs")
	}
}

// spec: NSESS-07, NSESS-14, NSESS-18, NODE-06, NODE-07, NODE-09, NODE-13, NSESS-10, NSESS-15, XFER-16
func TestStartRunsJobToRecorded(t *testing.T) {
	h, a := connected(t, nil, Options{})
	from := h.mark()
	startJob(t, h, "job-1", "r1", "# vk:hint cpus=1 mem=512", "echo hello from the job")
	acc, ai := waitFor(h, from, func(u *dispatch.JobUpdate) bool { return u.Job == "job-1" })
	if acc.State != dispatch.JobAccepted {
		t.Fatalf("first job update = %+v, want accepted", acc)
	}
	// journaled before accepted (NODE-06), without the job's secrets
	if e, ok := a.journal.Get("job-1"); !ok || e.Reservation != "r1" {
		t.Errorf("journal entry = %+v, %v", e, ok)
	} else if bytes.Contains(e.Spec, []byte("glcbt-secret-token")) {
		t.Errorf("journal holds the job token")
	}
	run, _ := waitFor(h, ai, func(u *dispatch.JobUpdate) bool { return u.Job == "job-1" && u.State == dispatch.JobRunning })
	if run.Guest == nil || run.Guest.CPUs != 1 || run.Guest.MemMiB != 512 {
		t.Errorf("running = %+v, want guest 1 cpu 512 MiB (the hint)", run)
	}
	waitFor(h, ai, func(u *dispatch.JobUpdate) bool {
		return u.Job == "job-1" && u.State == dispatch.JobRunning && u.Stage == "step_script"
	})
	_, fi := waitFor(h, ai, func(u *dispatch.JobUpdate) bool { return u.Job == "job-1" && u.State == dispatch.JobFinished })
	res, ri := waitFor(h, ai, func(r *dispatch.Result) bool { return r.Job == "job-1" })
	if ri < fi {
		t.Errorf("result before job finished")
	}
	if res.Result.Failure != "" || res.Result.Usage == nil || res.Result.Usage.CPUs != 1 || res.Result.Usage.MemMiB != 512 {
		t.Errorf("result = %+v usage %+v", res.Result, res.Result.Usage)
	}
	out := h.output("job-1")
	if !bytes.Contains(out, []byte("hello from the job")) || !bytes.Contains(out, []byte("after-script-ran")) {
		t.Errorf("output lacks the job's lines:\n%s", out)
	}
	if bytes.Contains(out, []byte("glcbt-secret-token")) {
		t.Errorf("output shows the job token")
	}
	if int64(len(out)) != res.Result.OutputLen {
		t.Errorf("hub holds %d bytes, result says %d", len(out), res.Result.OutputLen)
	}
	// The reservation was converted (NODE-07).
	h.send(&dispatch.Renew{Reservation: "r1", LeaseSecs: 30})
	l, _ := waitFor(h, ai, func(l *dispatch.Lease) bool { return l.Reservation == "r1" })
	if l.State != dispatch.LeaseGone || l.Why != dispatch.GoneStarted {
		t.Errorf("renew after start = %+v, want gone started", l)
	}
	// Recorded: journal and spool forget it, the ledger is empty.
	waitJobs(t, a, func() bool { return len(a.jobs) == 0 })
	if e, _ := a.journal.Get("job-1"); e.Phase != journal.PhaseRecorded {
		t.Errorf("journal phase = %s, want recorded", e.Phase)
	}
	if _, err := os.Stat(filepath.Join(a.spools, "job-1")); !os.IsNotExist(err) {
		t.Errorf("spool of a recorded job not removed: %v", err)
	}
	a.mu.Lock()
	s := a.led.Snapshot(a.now())
	a.mu.Unlock()
	if len(s.Jobs) != 0 || s.Used != (ledger.Envelope{}) {
		t.Errorf("ledger after the job = %+v", s)
	}
}

// spec: NODE-06, FAIL-15
func TestRedeliveredStartRunsOnce(t *testing.T) {
	h, _ := connected(t, nil, Options{})
	marker := filepath.Join(t.TempDir(), "runs")
	from := h.mark()
	startJob(t, h, "job-2", "r1", "echo run >> "+marker, "echo started; sleep 1")
	waitFor(h, from, func(u *dispatch.JobUpdate) bool { return u.Job == "job-2" && u.State == dispatch.JobRunning })
	// The connection drops; the hub, not knowing whether its start
	// arrived, sends it again on the new connection.
	h.cutAll()
	h.waitCond("reconnect", func() bool { return h.ups >= 2 })
	again := h.mark()
	h.send(&dispatch.Start{Job: "job-2", Reservation: "r1", Envelope: env1, Spec: testSpec("echo run >> " + marker)})
	// Answered accepted again (frames queued before the cut may come
	// first on a resumed session).
	waitFor(h, again, func(u *dispatch.JobUpdate) bool { return u.Job == "job-2" && u.State == dispatch.JobAccepted })
	resultOf(h, from, "job-2")
	// And once more after it finished.
	late := h.mark()
	h.send(&dispatch.Start{Job: "job-2", Reservation: "r1", Envelope: env1, Spec: testSpec("echo run >> " + marker)})
	waitFor(h, late, func(u *dispatch.JobUpdate) bool { return u.Job == "job-2" && u.State == dispatch.JobFinished })
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "run"); n != 1 {
		t.Errorf("job ran %d times, want 1", n)
	}
}

// spec: NODE-08, NSESS-21
func TestStartWithoutReservation(t *testing.T) {
	h, _ := connected(t, nil, Options{})
	from := h.mark()
	h.send(&dispatch.Start{Job: "job-big", Reservation: "r-unknown", Spec: testSpec("true"),
		Envelope: client.Envelope{Mem: 64 * client.GiB, Disk: client.GiB, CPUs: 1}})
	u, _ := waitFor(h, from, func(u *dispatch.JobUpdate) bool { return u.Job == "job-big" })
	if u.State != dispatch.JobRefused || u.Reason != dispatch.RefusalNoReservation {
		t.Errorf("start of a job too big without its reservation = %+v, want refused no_reservation", u)
	}
	h.send(&dispatch.Start{Job: "job-small", Reservation: "r-unknown", Envelope: env1, Spec: testSpec("echo fits")})
	u, _ = waitFor(h, from, func(u *dispatch.JobUpdate) bool { return u.Job == "job-small" })
	if u.State != dispatch.JobAccepted {
		t.Errorf("start of a fitting job without its reservation = %+v, want accepted", u)
	}
	resultOf(h, from, "job-small")
	h.send(&dispatch.Start{Job: "../evil", Envelope: env1, Spec: testSpec("true")})
	u, _ = waitFor(h, from, func(u *dispatch.JobUpdate) bool { return u.Job == "../evil" })
	if u.State != dispatch.JobRefused || u.Reason != dispatch.RefusalInvalid {
		t.Errorf("start with a path for an ID = %+v, want refused invalid", u)
	}
}

var lineRe = regexp.MustCompile(`line-(\d+)-end`)

// spec: NODE-11, NODE-13, FAIL-18, NSESS-15, NSESS-24
func TestOutputSurvivesCutsNoneLostNoneDoubled(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run("seed"+strconv.FormatUint(seed, 10), func(t *testing.T) { outputSurvivesCuts(t, seed) })
	}
}

// outputSurvivesCuts runs a job printing numbered lines while the hub side
// drops the link (the session resumes) or ends the session (a new one:
// held, output_ack at the stored offset, resend) after randomly chosen
// output frames, at most six times; the hub's stored bytes must equal the
// node's spooled bytes exactly.
func outputSurvivesCuts(t *testing.T, seed uint64) {
	h, a := connected(t, nil, Options{})
	const lines = 30000 // about 1.5 MB with timestamps
	rng := rand.New(rand.NewPCG(seed, 0x766b))
	cuts := 0
	h.mu.Lock()
	h.noRecord = true
	h.onOutput = func(int) {
		if cuts >= 6 {
			return
		}
		switch r := rng.IntN(6); r {
		case 0:
			cuts++
			h.cutAll() // the link drops: the session resumes
		case 1:
			cuts++
			h.mu.Lock()
			s := h.sess
			h.mu.Unlock()
			s.End(dispatch.ErrorShutdown, "test: session lost") // a new session
		}
	}
	h.mu.Unlock()
	from := h.mark()
	startJob(t, h, "job-out", "r1", "for i in $(seq 1 "+strconv.Itoa(lines)+"); do echo \"line-$i-end\"; done")
	res := resultOf(h, from, "job-out")
	h.mu.Lock()
	h.onOutput = nil
	h.mu.Unlock()
	got := h.output("job-out")
	spooled, err := os.ReadFile(filepath.Join(a.spools, "job-out", "output"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, spooled) {
		t.Errorf("hub holds %d bytes, the node produced %d; first difference at %d", len(got), len(spooled), firstDiff(got, spooled))
	}
	if int64(len(got)) != res.Result.OutputLen {
		t.Errorf("result output_len %d, hub holds %d", res.Result.OutputLen, len(got))
	}
	next := 1
	for _, m := range lineRe.FindAllSubmatch(got, -1) {
		n, _ := strconv.Atoi(string(m[1]))
		if n != next {
			t.Fatalf("line %d where %d was due: output lost or doubled", n, next)
		}
		next++
	}
	if next != lines+1 {
		t.Errorf("saw %d lines, want %d", next-1, lines)
	}
	h.mu.Lock()
	ups := h.ups
	h.mu.Unlock()
	t.Logf("seed %d: %d cuts, %d connections", seed, cuts, ups)
	if cuts == 0 {
		t.Errorf("the test cut nothing")
	}
	h.sendLive(&dispatch.Recorded{Job: "job-out"}) // the last cut may have ended the session
	waitJobs(t, a, func() bool { return len(a.jobs) == 0 })
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// spec: NSESS-16, NSESS-10
func TestResultRepeatedUntilRecorded(t *testing.T) {
	h, a := connected(t, nil, Options{ResultRetry: 20 * time.Millisecond})
	h.mu.Lock()
	h.ignore = 2
	h.mu.Unlock()
	from := h.mark()
	startJob(t, h, "job-r", "r1", "echo once")
	waitFor(h, from, func(u *dispatch.JobUpdate) bool { return u.Job == "job-r" && u.State == dispatch.JobAccepted })
	waitJobs(t, a, func() bool { return len(a.jobs) == 0 })
	h.mu.Lock()
	n := h.results["job-r"]
	h.mu.Unlock()
	if n != 3 {
		t.Errorf("hub got the result %d times, want 3 (two ignored, then recorded)", n)
	}
}

// spec: FAIL-08, NODE-06, NODE-11, NSESS-11, NSESS-16
func TestRestartMidJobEndsInterruptedWithOutput(t *testing.T) {
	h := startHub(t)
	cfg := testConfig(t, t.TempDir())
	// The first agent is a child process killed with SIGKILL: nothing it
	// has not written by then reaches the state dir.
	child := startChild(t, h, cfg)
	waitFor[*dispatch.Held](h, 0, nil)
	h.mu.Lock()
	h.noRecord = true
	h.mu.Unlock()
	from := h.mark()
	// The job's bash dies with the agent; its sleep, reparented, is
	// killed at the end.
	sleepPID := filepath.Join(t.TempDir(), "sleep.pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(sleepPID); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	startJob(t, h, "job-x", "r1", "echo before-the-crash", "sleep 60 & echo $! > "+sleepPID+"; wait", "echo never-printed")
	h.waitCond("output before the crash", func() bool { return bytes.Contains(h.out["job-x"], []byte("before-the-crash\n")) })
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	before := h.output("job-x")

	// A new process on the same state dir, which also holds the spool of
	// a start that was never journaled.
	orphan := filepath.Join(cfg.Node.StateDir, "spool", "job-orphan")
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	b := startAgent(t, h, cfg, Options{})
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Errorf("orphaned spool kept: %v", err)
	}
	held, _ := waitFor(h, from, func(m *dispatch.Held) bool { return len(m.Jobs) == 1 })
	if held.Jobs[0].Job != "job-x" || !held.Jobs[0].Finished {
		t.Errorf("held after restart = %+v, want job-x finished", held.Jobs)
	}
	res := resultOf(h, from, "job-x")
	if res.Result.Failure != client.FailureInterrupted {
		t.Errorf("failure = %q, want interrupted", res.Result.Failure)
	}
	got := h.output("job-x")
	if !bytes.HasPrefix(got, before) || !bytes.Contains(got[len(before):], []byte(interruptedMessage)) {
		t.Errorf("output after restart does not continue the output before it:\nbefore %q\nafter  %q", before, got)
	}
	if bytes.Contains(got, []byte("never-printed")) {
		t.Errorf("the job ran on after the crash:\n%s", got)
	}
	if int64(len(got)) != res.Result.OutputLen {
		t.Errorf("output_len %d, hub holds %d", res.Result.OutputLen, len(got))
	}
	h.send(&dispatch.Recorded{Job: "job-x"})
	waitJobs(t, b, func() bool { return len(b.jobs) == 0 })
	if e, _ := b.journal.Get("job-x"); e.Phase != journal.PhaseRecorded {
		t.Errorf("journal phase %s, want recorded", e.Phase)
	}
}

// spec: NSESS-09, FAIL-09
func TestCancel(t *testing.T) {
	for _, mode := range []client.CancelMode{client.CancelGraceful, client.CancelImmediate} {
		t.Run(string(mode), func(t *testing.T) {
			h, _ := connected(t, nil, Options{})
			startJob(t, h, "job-c", "r1", "trap 'echo got-term; exit 3' TERM", "echo ready", "sleep 60 & wait")
			h.waitCond("job ready", func() bool { return bytes.Contains(h.out["job-c"], []byte("ready\n")) })
			at := h.mark()
			h.send(&dispatch.Cancel{Job: "job-c", Mode: mode})
			u, ui := waitFor(h, at, func(u *dispatch.JobUpdate) bool { return u.Job == "job-c" })
			if u.State != dispatch.JobRunning || u.Activity != "canceling" {
				t.Errorf("cancel answered %+v, want running canceling", u)
			}
			_, fi := waitFor(h, ui, func(u *dispatch.JobUpdate) bool { return u.Job == "job-c" && u.State == dispatch.JobFinished })
			res := resultOf(h, fi, "job-c")
			if res.Result.Failure != client.FailureCanceled {
				t.Errorf("failure = %q, want canceled", res.Result.Failure)
			}
			out := h.output("job-c")
			graceful := mode == client.CancelGraceful
			if ran := bytes.Contains(out, []byte("after-script-ran")); ran != graceful {
				t.Errorf("%s cancel: after_script ran = %v, want %v", mode, ran, graceful)
			}
		})
	}
}

// spec: NODE-05, PLACE-12
func TestQuarantineReleases(t *testing.T) {
	h, a := connected(t, nil, Options{})
	holdOne(h, a)
	from := h.mark()
	a.SetState(ledger.StateQuarantined)
	l, _ := waitFor(h, from, func(l *dispatch.Lease) bool { return l.Reservation == "r-first" })
	if l.State != dispatch.LeaseGone || l.Why != dispatch.GoneReleased {
		t.Errorf("quarantine: %+v, want gone released", l)
	}
	hb, _ := waitFor(h, from, func(hb *dispatch.Heartbeat) bool { return hb.State == dispatch.NodeQuarantined })
	if hb.Load1 == nil || hb.Free == nil || hb.Free.CPUs != 4 {
		t.Errorf("heartbeat = %+v, want load1 and all 4 cpus free", hb)
	}
}

func TestMetrics(t *testing.T) {
	h, a := connected(t, func(c *Config) { c.Node.MetricsListen = "127.0.0.1:0" }, Options{})
	holdOne(h, a)
	resp, err := http.Get("http://" + a.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	for _, want := range []string{
		`vk_node_reservations 1`,
		`vk_node_ledger_used{resource="cpus"} 1`,
		`vk_node_capacity{resource="mem"} 8.589934592e+09`,
		`vk_node_offers_total{reason="",reply="accepted"} 1`,
		`vk_node_state{state="ready"} 1`,
		`vk_node_session_connected 1`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
}

// spec: NODE-09, NODE-02
func TestJobNeedingMoreWaitsInTheLedger(t *testing.T) {
	h, _ := connected(t, nil, Options{})
	from := h.mark()
	h.send(&dispatch.Offer{Reservation: "r-big", Envelope: client.Envelope{Mem: client.GiB, Disk: client.GiB, CPUs: 3}, LeaseSecs: 90})
	waitFor(h, from, func(r *dispatch.OfferReply) bool {
		return r.Reservation == "r-big" && r.Reply == dispatch.ReplyAccepted
	})
	// 4 CPUs: r-big holds 3, r1 the last one; the job asks for 2.
	startJob(t, h, "job-w", "r1", "# vk:hint cpus=2", "echo ran")
	_, ai := waitFor(h, from, func(u *dispatch.JobUpdate) bool { return u.Job == "job-w" && u.State == dispatch.JobAccepted })
	// While it waits, a renew of r-big proves the node has handled
	// everything sent so far; the job must not have started.
	h.send(&dispatch.Renew{Reservation: "r-big", LeaseSecs: 90})
	_, li := waitFor(h, ai, func(l *dispatch.Lease) bool { return l.Reservation == "r-big" })
	h.mu.Lock()
	for _, m := range h.log[ai+1 : li] {
		if u, ok := m.(*dispatch.JobUpdate); ok && u.Job == "job-w" {
			t.Errorf("job update %+v while it waits for a CPU", u)
		}
	}
	h.mu.Unlock()
	h.send(&dispatch.Release{Reservation: "r-big"})
	run, _ := waitFor(h, li, func(u *dispatch.JobUpdate) bool { return u.Job == "job-w" && u.State == dispatch.JobRunning })
	if run.Guest == nil || run.Guest.CPUs != 2 {
		t.Errorf("running = %+v, want 2 cpus", run)
	}
	if r := resultOf(h, li, "job-w"); r.Result.Failure != "" || r.Result.Usage == nil || r.Result.Usage.CPUs != 2 {
		t.Errorf("result = %+v", r.Result)
	}
}

// spec: FAIL-08, NODE-05
func TestShutdownDrainsThenInterrupts(t *testing.T) {
	h, a := connected(t, nil, Options{})
	from := h.mark()
	startJob(t, h, "job-s", "r1", "echo started", "sleep 60")
	h.waitCond("job started", func() bool { return bytes.Contains(h.out["job-s"], []byte("started\n")) })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Shutdown(ctx) }()
	waitJobs(t, a, func() bool { return a.led.Snapshot(a.now()).State == ledger.StateDraining })
	at := h.mark()
	h.send(&dispatch.Offer{Reservation: "r-late", Envelope: env1, LeaseSecs: 90})
	rep, _ := waitFor(h, at, func(r *dispatch.OfferReply) bool { return r.Reservation == "r-late" })
	if rep.Reason != dispatch.RefusalNotReady {
		t.Errorf("offer while draining = %+v, want refused not_ready", rep)
	}
	cancel() // the shutdown timeout
	res := resultOf(h, from, "job-s")
	if res.Result.Failure != client.FailureInterrupted {
		t.Errorf("failure = %q, want interrupted", res.Result.Failure)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown = %v", err)
	}
	if !bytes.Contains(h.output("job-s"), []byte("Job failed")) {
		t.Errorf("trace does not say the job failed:\n%s", h.output("job-s"))
	}
}

// spec: NODE-11, FAIL-18, FAIL-08
func TestWindowHoldsWhileHubSilentAndShutdownStillEnds(t *testing.T) {
	h, a := connected(t, func(c *Config) { c.Output.SpoolLimit = 8 * client.MiB }, Options{ResultGrace: time.Millisecond})
	h.mu.Lock()
	h.noAck = true
	h.mu.Unlock()
	// About 20 MB of output: far past the 4 MiB window and the 8 MiB
	// spool limit, so the job blocks on its output.
	startJob(t, h, "job-q", "r1", "yes line-of-output | head -n 1000000", "echo done")
	h.waitCond("the window's worth of output", func() bool { return len(h.out["job-q"]) >= dispatch.MaxUnackedOutput })
	// The job's output is an external process's: poll the spool file
	// until it holds nearly the 8 MiB limit (with a deadline): the job
	// spools on past the 4 MiB in flight (FAIL-18).
	spooled := filepath.Join(a.spools, "job-q", "output")
	size := func() int64 {
		fi, err := os.Stat(spooled)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	for deadline := time.Now().Add(30 * time.Second); size() < 7*client.MiB.Bytes(); {
		if time.Now().After(deadline) {
			t.Fatalf("spool holds %d bytes after 30 s, want nearly the 8 MiB limit", size())
		}
		time.Sleep(time.Millisecond)
	}
	// The operator stops the node with the hub silent: the job is
	// interrupted and Shutdown returns although its output cannot drain.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if got := len(h.output("job-q")); got != dispatch.MaxUnackedOutput {
		t.Errorf("hub received %d bytes with nothing acked, want exactly the 4 MiB window", got)
	}
	if got := size(); got > 8*client.MiB.Bytes() {
		t.Errorf("spool holds %d bytes with nothing acked: over the 8 MiB limit", got)
	}
}

// spec: PLACE-06, PLACE-07
func TestLoweredCeilingKeepsRunningJobs(t *testing.T) {
	h, _ := connected(t, nil, Options{})
	from := h.mark()
	startJob(t, h, "job-a", "r-a", "echo a-started", "sleep 1", "echo a-done")
	startJob(t, h, "job-b", "r-b", "echo b-started", "sleep 1", "echo b-done")
	h.waitCond("both jobs running", func() bool {
		return bytes.Contains(h.out["job-a"], []byte("a-started\n")) && bytes.Contains(h.out["job-b"], []byte("b-started\n"))
	})
	h.send(&dispatch.Settings{Ceiling: 1, Pools: []string{"small"}})
	rep, _ := waitFor(h, from, func(r *dispatch.Report) bool { return len(r.Pools) == 1 })
	if rep.Pools[0] != "small" {
		t.Errorf("report after settings: pools %q, want the hub's", rep.Pools)
	}
	at := h.mark()
	h.send(&dispatch.Offer{Reservation: "r-c", Envelope: env1, LeaseSecs: 90})
	if r, _ := waitFor(h, at, func(r *dispatch.OfferReply) bool { return r.Reservation == "r-c" }); r.Reason != dispatch.RefusalCeiling {
		t.Errorf("offer over the lowered ceiling = %+v, want refused ceiling", r)
	}
	for _, j := range []string{"job-a", "job-b"} {
		if r := resultOf(h, from, j); r.Result.Failure != "" {
			t.Errorf("%s under a lowered ceiling ended %q, want success", j, r.Result.Failure)
		}
	}
}
