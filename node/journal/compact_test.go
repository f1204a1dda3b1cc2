package journal

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// bigSpec is a start's spec of about 1 KB.
func bigSpec(id string) []byte { return append(spec(id), bytes.Repeat([]byte("x"), 1000)...) }

// onDiskBig reports whether job's bigSpec is in the raw journal bytes.
func onDiskBig(raw []byte, job string) bool {
	return bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString(bigSpec(job))))
}

// lowSlack sets compactSlack to n for the test.
func lowSlack(t *testing.T, n int64) {
	t.Helper()
	old := compactSlack
	compactSlack = n
	t.Cleanup(func() { compactSlack = old })
}

// Finished appends one record and rewrites nothing while the file is
// within its bound: the start that comes next never waits for a rewrite.
func TestFinishedAppendsOnly(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir)
	path := filepath.Join(dir, FileName)
	j.Accept("j1", "", spec("j1"))
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Finished("j1", []byte(`{"exit_code":0}`)); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || after.Size() <= before.Size() || j.compactions != 0 {
		t.Fatalf("Finished rewrote the journal: same file %v, size %d → %d, %d compactions",
			os.SameFile(before, after), before.Size(), after.Size(), j.compactions)
	}
}

// However many jobs pass, the file stays within twice its live records
// plus the slack (and the record that crossed it), and each compaction
// leaves no finished job's spec and every unfinished job's spec on disk.
func TestCompactionBoundsTheFile(t *testing.T) {
	lowSlack(t, 8<<10)
	old := keepRecorded
	keepRecorded = 16
	t.Cleanup(func() { keepRecorded = old })
	dir := t.TempDir()
	j := open(t, dir)
	path := filepath.Join(dir, FileName)
	var live []string // jobs accepted and not finished, oldest first
	seen := 0
	for i := range 400 {
		id := fmt.Sprintf("j%03d", i)
		if _, _, err := j.Accept(id, "", bigSpec(id)); err != nil {
			t.Fatal(err)
		}
		live = append(live, id)
		if len(live) > 4 {
			done := live[0]
			live = live[1:]
			if err := j.Finished(done, []byte(`{"exit_code":0}`)); err != nil {
				t.Fatal(err)
			}
			if err := j.Recorded(done); err != nil {
				t.Fatal(err)
			}
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		// One start (about 1.5 KB) may sit past the bound until the next
		// Finished compacts.
		if limit := j.boundLocked() + 2048; fi.Size() > limit {
			t.Fatalf("after %d jobs the file is %d bytes, over its bound %d", i+1, fi.Size(), limit)
		}
		if j.compactions == seen {
			continue
		}
		seen = j.compactions
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k <= i; k++ {
			id := fmt.Sprintf("j%03d", k)
			if want := slices.Contains(live, id); onDiskBig(raw, id) != want {
				t.Fatalf("after compaction %d: %s's spec on disk = %v, want %v", seen, id, !want, want)
			}
		}
	}
	if seen < 5 {
		t.Fatalf("%d compactions over 400 jobs with an 8 KiB slack, want several", seen)
	}
	// What the journal remembers survives a reopen unchanged.
	wantLive := j.Unfinished()
	j.Close()
	j = open(t, dir)
	if diff := cmp.Diff(wantLive, j.Unfinished(), entryCmp); diff != "" {
		t.Fatalf("unfinished after reopen (-want +got):\n%s", diff)
	}
	j.mu.Lock()
	n := len(j.entries)
	j.mu.Unlock()
	if n != 4+16 {
		t.Fatalf("after reopen the journal holds %d jobs, want 4 unfinished and 16 recorded", n)
	}
}

// Open compacts a file past its bound (a node stopped before its next
// compaction, or a journal written by a node that compacted at every
// result), and leaves one within it as it is.
func TestOpenCompactsAnOversizedFile(t *testing.T) {
	var data []byte
	for _, r := range []record{
		{Kind: kindAccepted, Job: "j", Spec: bigSpec("j")},
		{Kind: kindFinished, Job: "j", Result: []byte("{}")},
		{Kind: kindAccepted, Job: "k", Spec: spec("k")},
	} {
		b, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	for _, slack := range []int64{CompactSlack, 0} {
		t.Run(fmt.Sprint("slack ", slack), func(t *testing.T) {
			lowSlack(t, slack)
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o600); err != nil {
				t.Fatal(err)
			}
			j := open(t, dir)
			raw, err := os.ReadFile(filepath.Join(dir, FileName))
			if err != nil {
				t.Fatal(err)
			}
			oversized := slack == 0
			if onDiskBig(raw, "j") == oversized || (j.compactions == 1) != oversized {
				t.Fatalf("finished spec on disk after Open = %v (%d compactions), want it compacted away: %v",
					onDiskBig(raw, "j"), j.compactions, oversized)
			}
			if !onDisk(raw, "k") {
				t.Fatal("an unfinished job's spec left the disk")
			}
			if got := j.Unrecorded(); len(got) != 1 || got[0].Job != "j" || got[0].Spec != nil {
				t.Fatalf("Unrecorded = %+v", got)
			}
		})
	}
}
