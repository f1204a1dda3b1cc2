package wtrace

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/sched"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testCfg(t *testing.T) Config {
	return Config{Dir: t.TempDir()}.WithDefaults("")
}

// a day of one job: the events the hub's driver steps, in order
func oneJob(r *Recorder, at time.Time, job uint64) {
	pol := sched.Policy{Tenants: map[sched.TenantID]sched.TenantPolicy{1: {Weight: 3, Cap: 5}}}
	r.Step(at, sched.PolicyChanged{Policy: pol}, nil)
	r.Step(at, sched.RelayInventory{Relay: 1, Runners: []sched.RunnerInfo{{Runner: 7, Tenant: 1, RequestConcurrency: 2,
		Placement: sched.Placement{Pool: "linux", Envelope: sched.Resources{CPUs: 2, MemBytes: 4 << 30, DiskBytes: 10 << 30}}}}}, nil)
	r.Step(at, sched.NodeReport{Node: 3, Capacity: sched.Resources{CPUs: 16, MemBytes: 64 << 30}, Pools: []string{"linux"}}, nil)
	r.Step(at, sched.TicketQueued{Ticket: 11, Runner: 7}, []sched.Action{sched.Grant{Ticket: 11, Admission: 21, Node: 3}})
	r.Step(at.Add(time.Second), sched.Claimed{Admission: 21}, nil)
	r.Step(at.Add(2*time.Second), sched.Outcome{Admission: 21, Kind: sched.OutcomeJob}, nil)
	r.Step(at.Add(2*time.Second), sched.JobSubmitted{Job: sched.JobID(job), Runner: 7, Admission: 21, Name: "grp/app/build",
		Project: "SECRET-project-token", Ref: "SECRET-ref", Images: []string{"registry/SECRET-image"}}, nil)
	r.Step(at.Add(3*time.Second), sched.Tick{}, nil)
	r.Step(at.Add(3*time.Second), sched.JobStartReplied{Job: sched.JobID(job), Node: 3, Accepted: true}, nil)
	r.Step(at.Add(63*time.Second), sched.JobFinished{Job: sched.JobID(job), Name: "grp/app/build", Wall: time.Minute}, nil)
}

func readDir(t *testing.T, dir string) []Record {
	t.Helper()
	list, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var all []Record
	for _, f := range list {
		b, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		_, recs, err := ReadAll(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		all = append(all, recs...)
	}
	return all
}

// The recorder writes the facts of a job's life, and nothing of its
// project, ref or images beyond the job's name.
// spec: BS-18
func TestRecordsJobFactsNoSecrets(t *testing.T) {
	cfg := testCfg(t)
	r, err := Open(cfg, func(id sched.TenantID) string { return "team-a" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	oneJob(r, t0, 1)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	list, _ := List(cfg.Dir)
	for _, f := range list {
		b, _ := os.ReadFile(f.Path)
		if bytes.Contains(b, []byte("SECRET")) {
			t.Fatalf("trace holds a secret-marked field:\n%s", b)
		}
	}
	var kinds []string
	for _, rec := range readDir(t, cfg.Dir) {
		kinds = append(kinds, string(rec.K))
		switch rec.K {
		case KindPolicy:
			if len(rec.Policy.Tenants) != 1 || rec.Policy.Tenants[0].Name != "team-a" || rec.Policy.Tenants[0].Weight != 3 {
				t.Errorf("policy %+v", rec.Policy)
			}
		case KindEnd:
			if rec.Wall != 60_000 || rec.Reason != "finished" {
				t.Errorf("end %+v", rec)
			}
		case KindSubmit:
			if rec.Name != "grp/app/build" || rec.Runner != 7 || rec.Adm != 21 {
				t.Errorf("submit %+v", rec)
			}
		}
	}
	want := "policy runner node demand grant ask answer submit start end"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("kinds %q, want %q", got, want)
	}
}

// A full buffer drops records and counts them; Step never waits for the
// writer. The drops are written as a drop record once the writer runs.
// spec: BS-18
func TestFullBufferDropsNeverBlocks(t *testing.T) {
	cfg := testCfg(t)
	cfg.Buffer = 4
	r := newRecorder(cfg, nil, nil) // writer not running: a stalled disk
	done := make(chan struct{})
	go func() {
		for i := range 10 {
			r.Step(t0, sched.TicketQueued{Ticket: sched.TicketID(i + 1), Runner: 1}, nil)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a guard against a hang, not a synchronisation
		t.Fatal("Step blocked on a full buffer")
	}
	if got := r.Dropped(); got != 6 {
		t.Fatalf("dropped %d, want 6", got)
	}
	go r.write(&files{cfg: cfg, log: r.log})
	r.Step(t0.Add(time.Second), sched.TicketQueued{Ticket: 99, Runner: 1}, nil) // may drop too
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	var drops int64
	for _, rec := range readDir(t, cfg.Dir) {
		if rec.K == KindDrop {
			drops += rec.N
		}
	}
	if drops != r.Dropped() || drops < 6 {
		t.Fatalf("drop records say %d, recorder counted %d", drops, r.Dropped())
	}
}

// Files rotate by size and age, old ones are deleted by age and by the
// total size, and every file begins with the state in force, so it
// replays alone.
// spec: BS-18
func TestRotationAndRetention(t *testing.T) {
	cfg := testCfg(t)
	cfg.RotateMins = 60
	cfg.MaxAgeHours = 5
	r, err := Open(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for h := range 12 { // one job an hour for 12 hours
		oneJob(r, t0.Add(time.Duration(h)*time.Hour), uint64(h+1))
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	list, _ := List(cfg.Dir)
	if len(list) < 5 || len(list) > 7 {
		t.Fatalf("%d files after 12 h with rotation hourly and a 5 h age limit", len(list))
	}
	for _, f := range list {
		b, _ := os.ReadFile(f.Path)
		_, recs, err := ReadAll(bytes.NewReader(b))
		if err != nil || len(recs) == 0 || recs[0].K != KindPolicy {
			t.Fatalf("%s does not start with the policy: %v", f.Path, err)
		}
	}
	// size: files of at most ~1 KiB, 3 KiB in all
	cfg2 := testCfg(t)
	cfg2.FileBytes, cfg2.MaxBytes = 1024, 4096
	r2, _ := Open(cfg2, nil, nil)
	for i := range 200 {
		oneJob(r2, t0.Add(time.Duration(i)*time.Minute), uint64(i+1))
	}
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	list, _ = List(cfg2.Dir)
	var total int64
	for _, f := range list {
		total += f.Size
	}
	if total > cfg2.MaxBytes+cfg2.FileBytes { // the current file may pass FileBytes by one record
		t.Fatalf("%d bytes in %d files, limit %d", total, len(list), cfg2.MaxBytes)
	}
}

// Export keeps the records from since on, with the state in force at
// since and the jobs open then.
// spec: BS-18
func TestExportSince(t *testing.T) {
	cfg := testCfg(t)
	cfg.RotateMins = 30
	r, _ := Open(cfg, nil, nil)
	for h := range 4 {
		oneJob(r, t0.Add(time.Duration(h)*time.Hour), uint64(h+1))
	}
	// a job open across the cut: submitted and started before it
	at := t0.Add(4*time.Hour - time.Minute)
	r.Step(at, sched.TicketQueued{Ticket: 500, Runner: 7}, []sched.Action{sched.Grant{Ticket: 500, Admission: 600, Node: 3}})
	r.Step(at, sched.Claimed{Admission: 600}, nil)
	r.Step(at, sched.Outcome{Admission: 600, Kind: sched.OutcomeJob}, nil)
	r.Step(at, sched.JobSubmitted{Job: 50, Runner: 7, Admission: 600, Name: "x/y"}, nil)
	r.Step(at, sched.JobStartReplied{Job: 50, Node: 3, Accepted: true}, nil)
	r.Step(at.Add(5*time.Minute), sched.JobFinished{Job: 50, Wall: 5 * time.Minute}, nil)
	oneJob(r, t0.Add(5*time.Hour), 9)
	r.Close()
	var buf bytes.Buffer
	since := t0.Add(4 * time.Hour)
	if err := Export(cfg.Dir, since, &buf); err != nil {
		t.Fatal(err)
	}
	h, recs, err := ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if h.Start != since.UnixMilli() {
		t.Errorf("header start %d", h.Start)
	}
	jobs := map[uint64]bool{}
	var heads int
	for _, rec := range recs {
		if rec.K == KindSubmit {
			jobs[rec.Job] = true
		}
		if rec.T < since.UnixMilli() && rec.Job != 50 && rec.Adm != 600 && rec.Ticket != 500 {
			t.Errorf("record before since that is not of the open job: %+v", rec)
		}
		if rec.T == since.UnixMilli() && (rec.K == KindPolicy || rec.K == KindRunner || rec.K == KindNode) {
			heads++
		}
	}
	if !jobs[50] || !jobs[9] || jobs[4] || jobs[1] {
		t.Errorf("jobs in the export: %v, want 50 and 9 only", jobs)
	}
	if heads < 3 {
		t.Errorf("state head has %d records", heads)
	}
}

// A torn last line ends a trace quietly; a bad line inside it is an error;
// a header of another version is refused.
func TestReaderEdges(t *testing.T) {
	good := `{"vktrace":1,"start":0}` + "\n" + `{"t":1,"k":"demand","tk":1,"rn":2}` + "\n"
	if _, recs, err := ReadAll(strings.NewReader(good + `{"t":2,"k":"dem`)); err != nil || len(recs) != 1 {
		t.Fatalf("torn tail: %v, %d records", err, len(recs))
	}
	if _, _, err := ReadAll(strings.NewReader(good + "{oops\n" + `{"t":3,"k":"ask"}` + "\n")); err == nil {
		t.Fatal("a bad line inside the trace was accepted")
	}
	if _, _, err := ReadAll(strings.NewReader(`{"vktrace":2,"start":0}` + "\n")); err == nil {
		t.Fatal("version 2 accepted")
	}
	if _, _, err := ReadAll(strings.NewReader(`{"vktrace":1}` + "\n" + `{"t":1,"k":"end","wall":-5}` + "\n")); err == nil {
		t.Fatal("negative wall accepted")
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte(`{"vktrace":1,"start":0}` + "\n" + `{"t":1,"k":"policy","policy":{"tenants":[{"id":1,"weight":2}]}}` + "\n"))
	f.Add([]byte(`{"vktrace":1}` + "\n" + `{"t":1,"k":"node","nd":1,"cpus":8}` + "\n" + `{"t":`))
	f.Add([]byte(`{"vktrace":1}` + "\n" + `{"t":5,"k":"queue","job":3,"rn":7,"queued":12500,"pending":40}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rd, err := NewReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		for range 100_000 {
			rec, err := rd.Next()
			if err != nil {
				if err != io.EOF && !strings.Contains(err.Error(), "bad trace") {
					t.Fatalf("error without ErrTrace: %v", err)
				}
				return
			}
			if rec.Wall < 0 || rec.CPUs < 0 || rec.Queued < 0 || rec.Pending < 0 {
				t.Fatalf("negative amount passed: %+v", rec)
			}
			// what decodes, encodes and decodes the same
			var buf bytes.Buffer
			w, _ := NewWriter(&buf, Header{})
			_ = w.Write(&rec)
			_ = w.Flush()
			_, again, err := ReadAll(&buf)
			if err != nil || len(again) != 1 || again[0].K != rec.K || again[0].T != rec.T {
				t.Fatalf("round trip of %+v: %v %+v", rec, err, again)
			}
		}
	})
}

// A queue record carries GitLab's time in queue and queue size; a reader
// takes it and its refusals (negative, absurd) like any record's, and the
// kind is one a reader that predates it skips (version 1 still).
// spec: BS-18
func TestQueueRecord(t *testing.T) {
	cfg := testCfg(t)
	r := newRecorder(cfg, nil, nil)
	go r.write(&files{cfg: cfg, log: r.log})
	oneJob(r, t0, 5)
	r.Queue(t0.Add(2*time.Second), 5, 7, 12500*time.Millisecond, 40)
	r.Queue(t0.Add(2*time.Second), 6, 7, -time.Second, -1) // clamped, never negative
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	var qs []Record
	for _, rec := range readDir(t, cfg.Dir) {
		if rec.K == KindQueue {
			qs = append(qs, rec)
		}
	}
	want := []Record{{T: t0.Add(2 * time.Second).UnixMilli(), K: KindQueue, Job: 5, Runner: 7, Queued: 12500, Pending: 40},
		{T: t0.Add(2 * time.Second).UnixMilli(), K: KindQueue, Job: 6, Runner: 7}}
	if len(qs) != 2 || qs[0].T != want[0].T || qs[0].Job != 5 || qs[0].Runner != 7 || qs[0].Queued != 12500 || qs[0].Pending != 40 ||
		qs[1].Queued != 0 || qs[1].Pending != 0 {
		t.Fatalf("queue records %+v, want %+v", qs, want)
	}
	for _, bad := range []string{`{"t":1,"k":"queue","queued":-1}`, `{"t":1,"k":"queue","pending":-1}`,
		`{"t":1,"k":"queue","queued":3600000001}`} {
		if _, _, err := ReadAll(strings.NewReader(`{"vktrace":1}` + "\n" + bad + "\n")); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	// a reader of the first release: its record type has no queue fields
	// and it knows no queue kind; the line still decodes and is skipped
	type oldRecord struct {
		T int64 `json:"t"`
		K Kind  `json:"k"`
	}
	var old oldRecord
	if err := json.Unmarshal([]byte(`{"t":1,"k":"queue","job":3,"queued":5,"pending":2}`), &old); err != nil || old.K != KindQueue {
		t.Fatalf("an old reader's decode: %v %+v", err, old)
	}
}

// The fairness-drain bound survives the trace: a replay of a hub that set
// it (or turned fairness drains off) arbitrates as that hub did.
// spec: BS-18
func TestPolicyKeepsFairDrainMaxWait(t *testing.T) {
	for _, d := range []time.Duration{0, 7 * time.Minute, -time.Second} {
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(PolicyOf(sched.Policy{FairDrainMaxWait: d}, nil)); err != nil {
			t.Fatal(err)
		}
		var p Policy
		if err := json.Unmarshal(buf.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		if got := p.Sched().FairDrainMaxWait; got != d {
			t.Errorf("fair drain max wait %v came back %v (record %s)", d, got, strings.TrimSpace(buf.String()))
		}
	}
}
