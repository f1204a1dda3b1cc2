package journal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Read sees what a live journal records, in acceptance order, leaves a
// torn tail in the file (it writes nothing) and reads a missing journal as
// empty.
func TestReadWhileOpen(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	accept(t, j, "a", "r1")
	if err := j.Running("a", "step_script"); err != nil {
		t.Fatal(err)
	}
	accept(t, j, "b", "")
	if err := j.Finished("a", []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{}
	for _, id := range []string{"a", "b"} {
		e, _ := j.Get(id)
		want = append(want, e)
	}
	if diff := cmp.Diff(want, got, entryCmp); diff != "" {
		t.Fatalf("Read (-want +got):\n%s", diff)
	}
	if got[0].Stage != "step_script" || got[0].Phase != PhaseFinished {
		t.Fatalf("a read as %+v", got[0])
	}

	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{9, 0, 0, 0, 1}) // a frame cut short by a crash
	f.Close()
	before, _ := os.ReadFile(path)
	if got, err := Read(dir); err != nil || len(got) != 2 {
		t.Fatalf("Read with a torn tail: %d entries, %v", len(got), err)
	}
	if after, _ := os.ReadFile(path); len(after) != len(before) {
		t.Fatalf("Read changed the file: %d bytes, was %d", len(after), len(before))
	}

	if got, err := Read(t.TempDir()); err != nil || len(got) != 0 {
		t.Fatalf("Read of a directory without a journal: %v, %v", got, err)
	}
}

func accept(t *testing.T, j *Journal, job, res string) {
	t.Helper()
	if _, _, err := j.Accept(job, res, spec(job)); err != nil {
		t.Fatal(err)
	}
}
