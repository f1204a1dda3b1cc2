package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func job(id int64) Job {
	return Job{GitLabID: id, Token: "glcbt-64_tok", SubmitRequestID: strings.Repeat("a", 32), Phase: PhaseTaken,
		Timestamps: true, Taken: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func compact(b []byte) string {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return "invalid: " + err.Error()
	}
	return out.String()
}

// The state directory is created 0700 and refused when group or others
// have any access.
//
// spec: RELAY-05
func TestCheckDir(t *testing.T) {
	base := t.TempDir()
	fresh := filepath.Join(base, "fresh", "state")
	if err := CheckDir(fresh); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o700 {
		t.Errorf("created mode %04o, want 0700", fi.Mode().Perm())
	}
	for _, mode := range []os.FileMode{0o750, 0o701, 0o710, 0o705, 0o777} {
		d := filepath.Join(base, mode.String())
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := CheckDir(d); !errors.Is(err, ErrDirMode) {
			t.Errorf("CheckDir(%04o) = %v, want ErrDirMode", mode, err)
		}
	}
}

// One file per runner, <dir>/<name>.json, mode 0600, surviving a reopen
// (a restart), records removed only on Delete.
//
// spec: RELAY-06, RELAY-07, RELAY-08, RELAY-09, TRACE-07
func TestStoreRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, "r1", "relay-1")
	if err != nil {
		t.Fatal(err)
	}
	j := job(42)
	j.Timestamps = false
	j.Response = []byte(`{"id":42}`)
	if err := s.Put(j); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(job(7)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "r1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %04o, want 0600", fi.Mode().Perm())
	}
	s2, err := Open(dir, "r1", "relay-1")
	if err != nil {
		t.Fatal(err)
	}
	got := s2.Jobs()
	if len(got) != 2 || got[0].GitLabID != 7 || got[1].GitLabID != 42 || got[1].Timestamps || compact(got[1].Response) != `{"id":42}` {
		t.Fatalf("reopened jobs = %+v", got)
	}
	if err := s2.Delete(42); err != nil {
		t.Fatal(err)
	}
	s3, _ := Open(dir, "r1", "relay-1")
	if s3.Len() != 1 {
		t.Errorf("after delete: %d jobs, want 1", s3.Len())
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

// A file holding jobs of another relay, or of a daemon from before relays,
// is refused; an empty one is taken over.
//
// spec: AUTH-16
func TestRelayMismatch(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir, "r1", "relay-1")
	if err := s.Put(job(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "r1", "relay-2"); !errors.Is(err, ErrRelay) {
		t.Errorf("Open as another relay = %v, want ErrRelay", err)
	}
	old := `{"version":1,"relay":"","runner":"r2","jobs":[{"gitlab_id":3,"token":"t","submit_request_id":"x","ff_timestamps":true,"phase":"committed","taken":"2026-01-01T00:00:00Z"}]}`
	if err := os.WriteFile(filepath.Join(dir, "r2.json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "r2", "relay-1"); !errors.Is(err, ErrRelay) || !strings.Contains(err.Error(), "before relays") {
		t.Errorf("Open of a pre-relay file = %v, want ErrRelay naming it", err)
	}
	if err := s.Delete(1); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "r1", "relay-2"); err != nil {
		t.Errorf("Open of an empty file as another relay = %v, want nil", err)
	}
}

// Orphaned files are named; Busy reports recorded jobs (for join/leave).
//
// spec: RELAY-04, AUTH-10
func TestOrphansAndBusy(t *testing.T) {
	dir := t.TempDir()
	if err := Busy(dir); err != nil {
		t.Errorf("Busy(empty) = %v", err)
	}
	if err := Busy(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("Busy(missing) = %v", err)
	}
	a, _ := Open(dir, "a", "relay-1")
	b, _ := Open(dir, "old", "relay-1")
	if err := b.Put(job(5)); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(job(6)); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(6); err != nil {
		t.Fatal(err)
	}
	orph, err := Orphans(dir, []string{"a"})
	if err != nil || len(orph) != 1 || orph[0] != "old.json" {
		t.Errorf("Orphans = %v, %v; want [old.json]", orph, err)
	}
	if err := Busy(dir); err == nil || !strings.Contains(err.Error(), "old.json") {
		t.Errorf("Busy = %v, want old.json named", err)
	}
}

// The system_id is made once and persisted.
//
// spec: GL-02
func TestSystemID(t *testing.T) {
	dir := t.TempDir()
	a, err := SystemID(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := SystemID(dir)
	if a != b || len(a) != 14 || !strings.HasPrefix(a, "s_") {
		t.Errorf("system ids %q, %q; want one persisted s_ + 12 hex", a, b)
	}
}

// Bad runner names never escape the directory.
func TestFileName(t *testing.T) {
	for _, n := range []string{"", ".", "..", "a/b", `a\b`, "a\x00"} {
		if _, err := FileName("/d", n); !errors.Is(err, ErrName) {
			t.Errorf("FileName(%q) = %v, want ErrName", n, err)
		}
	}
}

// Property: after any sequence of Puts, Begins and Deletes, a reopened
// store holds exactly the model's records (what was written is never
// lost, RELAY-09), and once a Begin's write is done the file holds every
// change made up to it: writes under way never put an older content
// over a newer one.
//
// spec: RELAY-09
func TestStoreModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp("", "statemodel")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		s, _ := Open(dir, "r", "relay-1")
		model := map[int64]Phase{}
		phases := []Phase{PhaseTaken, PhaseSubmitted, PhaseCommitted, PhaseReported, PhaseFailing}
		var pending []*Pending
		n := rapid.IntRange(1, 30).Draw(rt, "ops")
		for range n {
			id := rapid.Int64Range(1, 8).Draw(rt, "id")
			switch rapid.SampledFrom([]string{"put", "begin", "delete"}).Draw(rt, "op") {
			case "put":
				j := job(id)
				j.Phase = rapid.SampledFrom(phases).Draw(rt, "phase")
				if err := s.Put(j); err != nil {
					rt.Fatal(err)
				}
				model[id] = j.Phase
			case "begin":
				j := job(id)
				j.Phase = rapid.SampledFrom(phases).Draw(rt, "phase")
				p := s.Begin(j)
				model[id] = j.Phase
				if rapid.Bool().Draw(rt, "wait") {
					if err := p.Wait(); err != nil {
						rt.Fatal(err)
					}
					checkModel(rt, dir, model)
				} else {
					pending = append(pending, p)
				}
			default:
				if err := s.Delete(id); err != nil {
					rt.Fatal(err)
				}
				delete(model, id)
			}
		}
		for _, p := range pending {
			if err := p.Wait(); err != nil {
				rt.Fatal(err)
			}
		}
		checkModel(rt, dir, model)
	})
}

// checkModel reopens the state file in dir and compares it to model.
func checkModel(rt *rapid.T, dir string, model map[int64]Phase) {
	re, err := Open(dir, "r", "relay-1")
	if err != nil {
		rt.Fatal(err)
	}
	got := re.Jobs()
	if len(got) != len(model) {
		rt.Fatalf("reopened %d jobs, model %d", len(got), len(model))
	}
	for i, j := range got {
		if model[j.GitLabID] != j.Phase {
			rt.Fatalf("job %d phase %s, model %s", j.GitLabID, j.Phase, model[j.GitLabID])
		}
		if i > 0 && got[i-1].GitLabID >= j.GitLabID {
			rt.Fatalf("jobs not sorted")
		}
	}
}

// FuzzDecode: a state file's decoder never panics and accepts only files
// whose jobs all have an ID, a token and a phase.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":1,"relay":"r","runner":"a","jobs":[]}`))
	f.Add([]byte(`{"version":1,"relay":"r","runner":"a","jobs":[{"gitlab_id":1,"token":"t","submit_request_id":"x","ff_timestamps":true,"phase":"taken","taken":"2026-01-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"jobs":[{"gitlab_id":1},{"gitlab_id":1}]}`))
	f.Add([]byte(`{"version":1} {}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var v file
		if err := decodeFile(b, &v); err != nil {
			return
		}
		for _, j := range v.Jobs {
			if j.GitLabID <= 0 || j.Token == "" || j.Phase == "" {
				t.Fatalf("accepted a job without id, token or phase: %+v", j)
			}
		}
	})
}
