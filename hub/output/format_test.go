package output

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// dirNames lists dir's entries, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// wantLen fails unless the job's output has the given content and
// completeness.
func wantLen(t *testing.T, d *Dir, job, content string, complete bool) {
	t.Helper()
	n, c, err := d.Len(t.Context(), job)
	if err != nil || n != int64(len(content)) || c != complete {
		t.Fatalf("%s: Len = %d, %v, %v; want %d, %v", job, n, c, err, len(content), complete)
	}
	if got := readAll(t, d, job); string(got) != content {
		t.Fatalf("%s: content %q, want %q", job, got, content)
	}
}

// spec: FAIL-19, NODE-12
// The hub crashes after the last chunk's ack and before the output is
// marked complete (or before the mark reached the disk): after the
// restart the output is exact and incomplete, so readers wait on; the
// hub's restore marks it complete, and that mark holds across the next
// restart.
func TestCrashBetweenLastChunkAndComplete(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := open(t, dir)
	for i, part := range []string{"line 1\n", "line 2\n", "last\n"} {
		if _, err := d.Append(ctx, "j", int64(7*i), []byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	// The crash: d is abandoned with its files open (never closed before
	// the second Dir opens) and MarkComplete never ran.
	d2 := open(t, dir)
	wantLen(t, d2, "j", "line 1\nline 2\nlast\n", false)
	c, err := d2.ReadAt(ctx, "j", 7, 0)
	if err != nil || string(c.Data) != "line 2\nlast\n" || c.Complete {
		t.Fatalf("ReadAt(7) = %q complete %v, %v; want the rest, not complete", c.Data, c.Complete, err)
	}
	if err := d2.MarkComplete(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	wantLen(t, d2, "j", "line 1\nline 2\nlast\n", true)
	d2.Close()

	d3 := open(t, dir)
	wantLen(t, d3, "j", "line 1\nline 2\nlast\n", true)
	if _, err := d3.Append(ctx, "j", 19, []byte("more")); !errors.Is(err, ErrComplete) {
		t.Fatalf("new bytes after restart of a complete output: %v, want %v", err, ErrComplete)
	}
	if n, err := d3.Append(ctx, "j", 14, []byte("last\n")); err != nil || n != 19 {
		t.Fatalf("a repeated last chunk after restart = %d, %v; want 19, nil", n, err)
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"j.out"}) {
		t.Fatalf("files %v, want only j.out", got)
	}
}

// spec: FAIL-19, API-37, API-41
// A completed output reopened after a restart reads as complete from any
// offset, wakes waiters at once, refuses new bytes, is served through a
// read-only descriptor, and is one file per job (none for completion);
// Drop removes it. A job completed without output reads as empty and
// complete.
func TestCompletedOutputAfterRestart(t *testing.T) {
	for _, keep := range []int{DefaultMaxOpen, 0} {
		ctx := t.Context()
		dir := t.TempDir()
		d := open(t, dir)
		d.Append(ctx, "j", 0, []byte("hello, "))
		d.Append(ctx, "j", 7, []byte("world"))
		if err := d.MarkComplete(ctx, "j"); err != nil {
			t.Fatal(err)
		}
		if err := d.MarkComplete(ctx, "empty"); err != nil {
			t.Fatal(err)
		}
		if got := dirNames(t, dir); !slices.Equal(got, []string{"empty.out", "j.out"}) {
			t.Fatalf("files %v, want one per job", got)
		}
		d.Close()

		d2 := open(t, dir)
		d2.maxOpen = keep
		wantLen(t, d2, "j", "hello, world", true)
		wantLen(t, d2, "empty", "", true)
		for off, want := range map[int64]string{0: "hello, world", 7: "world", 12: ""} {
			c, err := d2.ReadAt(ctx, "j", off, 0)
			if err != nil || string(c.Data) != want || !c.Complete || c.Length != 12 {
				t.Fatalf("keep %d: ReadAt(%d) = %q complete %v length %d, %v; want %q complete", keep, off, c.Data, c.Complete, c.Length, err, want)
			}
		}
		if c, _ := d2.ReadAt(ctx, "j", 0, 5); c.Complete {
			t.Fatalf("keep %d: a read short of the end says complete", keep)
		}
		if err := d2.Wait(ctx, "j", 12); err != nil {
			t.Fatalf("Wait at the end of a complete output: %v", err)
		}
		if _, err := d2.Append(ctx, "j", 12, []byte("!")); !errors.Is(err, ErrComplete) {
			t.Fatalf("keep %d: new bytes: %v, want %v", keep, err, ErrComplete)
		}
		if f := d2.jobs["j"].f; keep > 0 {
			if f == nil {
				t.Fatalf("keep %d: no file kept after reads", keep)
			}
			if _, err := f.WriteAt([]byte("x"), 12); err == nil {
				t.Fatal("the kept descriptor of a complete output is writable")
			}
		} else if f != nil {
			t.Fatal("a file kept with keep 0")
		}
		for _, job := range []string{"j", "empty"} {
			if err := d2.Drop(ctx, job); err != nil {
				t.Fatal(err)
			}
		}
		if got := dirNames(t, dir); len(got) != 0 {
			t.Fatalf("files %v after Drop, want none", got)
		}
		wantLen(t, d2, "j", "", false)
	}
}

// spec: FAIL-19
// A hub upgraded in place still serves the output its older self wrote,
// which marked completion with an empty <job>.done: Open converts those
// marks (a complete output, a job completed without output) and removes
// the .done files; a running job's output goes on growing; a second
// Open finds nothing left to convert and the same outputs.
func TestOldFormatReadable(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"done.out": "finished output", "done.done": "",
		"nooutput.done": "",
		"running.out":   "half",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for pass := range 2 {
		d, err := Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := dirNames(t, dir); !slices.Equal(got, []string{"done.out", "nooutput.out", "running.out"}) {
			t.Fatalf("pass %d: files %v, want the .done marks converted", pass, got)
		}
		wantLen(t, d, "done", "finished output", true)
		wantLen(t, d, "nooutput", "", true)
		running := "half"
		if pass == 1 {
			running = "half more"
		}
		wantLen(t, d, "running", running, false)
		if pass == 0 {
			if n, err := d.Append(ctx, "running", 4, []byte(" more")); err != nil || n != 9 {
				t.Fatalf("Append to an old running output = %d, %v", n, err)
			}
		}
		if _, err := d.Append(ctx, "done", 15, []byte("x")); !errors.Is(err, ErrComplete) {
			t.Fatalf("pass %d: new bytes for an old complete output: %v, want %v", pass, err, ErrComplete)
		}
		d.Close()
	}
}

// BenchmarkJobOutput measures the output store's work for one job of
// vk-bench: a 4 KiB chunk (creating the job's file), completion, a read
// of the whole output, and the drop at settle. Results:
// docs/benchmarks.md "hub/output".
func BenchmarkJobOutput(b *testing.B) {
	d := open(b, b.TempDir())
	chunk := make([]byte, 4<<10)
	ctx := b.Context()
	i := 0
	for b.Loop() {
		job := "job" + strconv.Itoa(i)
		i++
		if _, err := d.Append(ctx, job, 0, chunk); err != nil {
			b.Fatal(err)
		}
		if err := d.MarkComplete(ctx, job); err != nil {
			b.Fatal(err)
		}
		if c, err := d.ReadAt(ctx, job, 0, 0); err != nil || !c.Complete || len(c.Data) != len(chunk) {
			b.Fatalf("read %d bytes, complete %v, %v", len(c.Data), c.Complete, err)
		}
		if err := d.Drop(ctx, job); err != nil {
			b.Fatal(err)
		}
	}
}
