package journal

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vk-ci/vk/internal/deptest"
	"github.com/vk-ci/vk/internal/testlog"
)

func open(t *testing.T, dir string) *Journal {
	t.Helper()
	j, err := Open(dir, testlog.New(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

var entryCmp = cmpopts.IgnoreUnexported(Entry{})

const secret = "glrt-SECRET-job-token"

// onDisk reports whether job's spec is in the raw journal bytes.
func onDisk(raw []byte, job string) bool {
	return bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString(spec(job))))
}

func spec(job string) []byte { return []byte(`{"job":"` + job + `","token":"` + secret + `"}`) }

// spec: NODE-06
func TestAcceptSurvivesRestartAndIsNeverFreshTwice(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	e, fresh, err := j.Accept("j1", "r1", spec("j1"))
	if err != nil || !fresh {
		t.Fatalf("Accept = %v %v", fresh, err)
	}
	want := Entry{Job: "j1", Reservation: "r1", Spec: spec("j1"), Phase: PhaseAccepted}
	if diff := cmp.Diff(want, e, entryCmp); diff != "" {
		t.Fatalf("entry (-want +got):\n%s", diff)
	}
	if _, fresh, _ := j.Accept("j1", "r1", spec("j1")); fresh {
		t.Fatal("redelivered Accept is fresh")
	}
	if _, _, err := j.Accept("j2", "", spec("j2")); err != nil {
		t.Fatal(err)
	}
	if err := j.Running("j2", "build_script"); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if _, _, err := j.Accept("j3", "", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after Close = %v, want ErrClosed", err)
	}

	// Restart: both jobs are unfinished, in acceptance order, and a
	// redelivered start is answered from the journal.
	j = open(t, dir)
	got := j.Unfinished()
	wantList := []Entry{want, {Job: "j2", Spec: spec("j2"), Phase: PhaseRunning, Stage: "build_script"}}
	if diff := cmp.Diff(wantList, got, entryCmp); diff != "" {
		t.Fatalf("Unfinished after restart (-want +got):\n%s", diff)
	}
	if e, fresh, err := j.Accept("j2", "", spec("j2")); err != nil || fresh || e.Stage != "build_script" {
		t.Fatalf("redelivered Accept after restart = %+v %v %v", e, fresh, err)
	}
}

// spec: NODE-06
func TestConcurrentRedeliveryRunsOnce(t *testing.T) {
	j := open(t, t.TempDir())
	var wg sync.WaitGroup
	var mu sync.Mutex
	freshN := 0
	for range 8 {
		wg.Go(func() {
			_, fresh, err := j.Accept("j", "", spec("j"))
			if err != nil {
				t.Error(err)
			}
			if fresh {
				mu.Lock()
				freshN++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if freshN != 1 {
		t.Fatalf("%d fresh accepts of one job, want 1", freshN)
	}
}

// spec: NSESS-10, NSESS-16
func TestLifecycle(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	j.Accept("j1", "", spec("j1"))
	j.Accept("j2", "", spec("j2"))
	if err := j.Running("j1", "get_sources"); err != nil {
		t.Fatal(err)
	}
	if err := j.Finished("j1", []byte(`{"exit_code":0}`)); err != nil {
		t.Fatal(err)
	}
	if e, _ := j.Get("j1"); e.Spec != nil || e.Phase != PhaseFinished {
		t.Fatalf("finished entry = %+v, want its spec dropped", e)
	}
	if got := j.Unrecorded(); len(got) != 1 || got[0].Job != "j1" || string(got[0].Result) != `{"exit_code":0}` {
		t.Fatalf("Unrecorded = %+v", got)
	}
	// Steps out of order.
	if err := j.Running("j1", "x"); !errors.Is(err, ErrPhase) {
		t.Fatalf("Running after Finished = %v", err)
	}
	if err := j.Recorded("j2"); !errors.Is(err, ErrPhase) {
		t.Fatalf("Recorded before Finished = %v", err)
	}
	if err := j.Running("nope", "x"); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("Running unknown = %v", err)
	}
	if err := j.Recorded("j1"); err != nil {
		t.Fatal(err)
	}
	if err := j.Recorded("j1"); err != nil {
		t.Fatalf("Recorded twice = %v", err)
	}
	j.Close()

	j = open(t, dir)
	if got := j.Unrecorded(); len(got) != 0 {
		t.Fatalf("Unrecorded after restart = %+v", got)
	}
	if got := j.Unfinished(); len(got) != 1 || got[0].Job != "j2" {
		t.Fatalf("Unfinished after restart = %+v", got)
	}
	// A recorded job still answers a very late redelivery.
	if e, fresh, _ := j.Accept("j1", "", spec("j1")); fresh || e.Phase != PhaseRecorded || e.Spec != nil {
		t.Fatalf("late redelivery = %+v fresh=%v", e, fresh)
	}
	if err := j.Forget("j1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := j.Get("j1"); ok {
		t.Fatal("Get after Forget found the job")
	}
}

func TestFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	lowSlack(t, 0) // so that Finished compacts: the new file must keep the mode
	j := open(t, dir)
	j.Accept("j", "", spec("j"))
	j.Finished("j", nil)
	if j.compactions != 1 {
		t.Fatalf("%d compactions, want 1", j.compactions)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, filepath.Join(dir, FileName): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("mode of %s = %v, want %v", path, fi.Mode(), want)
		}
	}
}

// spec: NODE-06
func TestTornTailIsTruncated(t *testing.T) {
	frame := func(r record) []byte {
		b, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := append(frame(record{Kind: kindAccepted, Job: "a", Spec: []byte("x")}),
		frame(record{Kind: kindRunning, Job: "a", Stage: "s"})...)
	last := frame(record{Kind: kindAccepted, Job: "b"})
	flipped := bytes.Clone(last)
	flipped[len(flipped)-2] ^= 0xff
	tests := []struct {
		name string
		tail []byte
	}{
		{"half a header", last[:5]},
		{"header only", last[:headerLen]},
		{"half a payload", last[:len(last)-3]},
		{"checksum mismatch", flipped},
		{"zero length", make([]byte, 16)},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 'x'}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, append(bytes.Clone(good), tt.tail...), 0o600); err != nil {
				t.Fatal(err)
			}
			j := open(t, dir)
			if got := j.Unfinished(); len(got) != 1 || got[0].Job != "a" || got[0].Stage != "s" {
				t.Fatalf("Unfinished = %+v", got)
			}
			if fi, _ := os.Stat(path); fi.Size() != int64(len(good)) {
				t.Fatalf("size after open = %d, want %d (tail truncated)", fi.Size(), len(good))
			}
			// Appends after the cut are whole records again.
			if _, _, err := j.Accept("b", "", nil); err != nil {
				t.Fatal(err)
			}
			j.Close()
			j = open(t, dir)
			if got := j.Unfinished(); len(got) != 2 {
				t.Fatalf("after reopen Unfinished = %+v", got)
			}
		})
	}
}

func TestRecordedPruned(t *testing.T) {
	old := keepRecorded
	keepRecorded = 2
	t.Cleanup(func() { keepRecorded = old })
	dir := t.TempDir()
	j := open(t, dir)
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		j.Accept(id, "", nil)
		j.Finished(id, nil)
		j.Recorded(id)
	}
	j.Accept("g", "", nil)
	j.Finished("g", nil)
	j.Close()
	j = open(t, dir)
	var kept []string
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		if _, ok := j.Get(id); ok {
			kept = append(kept, id)
		}
	}
	if diff := cmp.Diff([]string{"e", "f", "g"}, kept); diff != "" {
		t.Fatalf("kept (-want +got):\n%s", diff)
	}
}

// TestDeps keeps the journal off the wire types: the session converts.
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/node/journal", "github.com/vk-ci/vk/proto/dispatch")
}
