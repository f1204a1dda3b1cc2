package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

type modelEntry struct {
	Phase  Phase
	Stage  string
	Spec   []byte
	Result []byte
}

// Over random lifecycles, restarts, torn tails and compactions, the journal
// agrees with a model of what was durably written: no accepted job is lost
// or accepted twice, no step is lost, and a finished job's spec is gone.
// spec: NODE-06
func TestPropertyJournal(t *testing.T) {
	base := t.TempDir()
	old := compactSlack
	defer func() { compactSlack = old }()
	rapid.Check(t, func(t *rapid.T) {
		// Compactions at every step, now and then, or (as in a node) rarely.
		compactSlack = rapid.SampledFrom([]int64{0, 256, CompactSlack}).Draw(t, "slack")
		dir, err := os.MkdirTemp(base, "j")
		if err != nil {
			t.Fatal(err)
		}
		j, err := Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { j.Close() }()
		model := map[string]*modelEntry{}
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			job := fmt.Sprintf("j%d", rapid.IntRange(0, 5).Draw(t, "job"))
			m := model[job]
			switch rapid.IntRange(0, 6).Draw(t, "op") {
			case 0:
				spec := []byte(rapid.StringN(0, 40, -1).Draw(t, "spec"))
				_, fresh, err := j.Accept(job, "", spec)
				if err != nil {
					t.Fatal(err)
				}
				if fresh != (m == nil) {
					t.Fatalf("Accept(%s) fresh = %v, model has %+v", job, fresh, m)
				}
				if m == nil {
					if len(spec) == 0 {
						spec = nil
					}
					model[job] = &modelEntry{Phase: PhaseAccepted, Spec: spec}
				}
			case 1:
				stage := rapid.SampledFrom([]string{"prepare", "get_sources", "build_script"}).Draw(t, "stage")
				err := j.Running(job, stage)
				if ok := m != nil && (m.Phase == PhaseAccepted || m.Phase == PhaseRunning); ok != (err == nil) {
					t.Fatalf("Running(%s) = %v, model %+v", job, err, m)
				}
				if err == nil {
					m.Phase, m.Stage = PhaseRunning, stage
				}
			case 2:
				res := []byte(rapid.StringN(1, 20, -1).Draw(t, "result"))
				err := j.Finished(job, res)
				if ok := m != nil && (m.Phase == PhaseAccepted || m.Phase == PhaseRunning); ok != (err == nil) {
					t.Fatalf("Finished(%s) = %v, model %+v", job, err, m)
				}
				if err == nil {
					m.Phase, m.Result, m.Spec = PhaseFinished, res, nil
				}
			case 3:
				err := j.Recorded(job)
				if ok := m != nil && (m.Phase == PhaseFinished || m.Phase == PhaseRecorded); ok != (err == nil) {
					t.Fatalf("Recorded(%s) = %v, model %+v", job, err, m)
				}
				if err == nil {
					m.Phase = PhaseRecorded
				}
			case 4:
				if err := j.Forget(job); err != nil {
					t.Fatal(err)
				}
				delete(model, job)
			case 5, 6: // restart, sometimes after a torn append
				j.Close()
				if rapid.Bool().Draw(t, "torn") {
					f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_WRONLY|os.O_APPEND, 0)
					if err != nil {
						t.Fatal(err)
					}
					f.Write([]byte(rapid.StringN(1, 30, -1).Draw(t, "garbage")))
					f.Close()
				}
				if j, err = Open(dir, nil); err != nil {
					t.Fatal(err)
				}
			}
			got := map[string]*modelEntry{}
			for _, e := range append(j.Unfinished(), j.Unrecorded()...) {
				got[e.Job] = &modelEntry{e.Phase, e.Stage, e.Spec, e.Result}
			}
			for id, m := range model {
				if m.Phase == PhaseRecorded {
					e, ok := j.Get(id)
					if !ok || e.Phase != PhaseRecorded || e.Spec != nil {
						t.Fatalf("recorded %s = %+v %v", id, e, ok)
					}
				}
			}
			want := map[string]*modelEntry{}
			for id, m := range model {
				if m.Phase != PhaseRecorded {
					want[id] = m
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("journal vs model (-want +got):\n%s", diff)
			}
		}
	})
}
