package output

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
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
func wantLen(t *testing.T, d Store, job, content string, complete bool) {
	t.Helper()
	n, c, err := d.Len(t.Context(), job)
	if err != nil || n != int64(len(content)) || c != complete {
		t.Fatalf("%s: Len = %d, %v, %v; want %d, %v", job, n, c, err, len(content), complete)
	}
	if got := readAll(t, d, job); string(got) != content {
		t.Fatalf("%s: content %q, want %q", job, got, content)
	}
}

// activeSeg returns the segment the writer appends to, read under the
// log's lock (the writer changes it when it rolls).
func activeSeg(d *Log) *segment {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.active
}

// withSync replaces the log's sync for the test.
func withSync(t *testing.T, sync func(*os.File) error) {
	old := syncFile
	syncFile = sync
	t.Cleanup(func() { syncFile = old })
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
	// the second Log opens) and MarkComplete never ran.
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
}

// spec: FAIL-19, API-37, API-41
// A completed output reopened after a restart reads as complete from any
// offset, wakes waiters at once and refuses new bytes; a job completed
// without output reads as empty and complete. Once both are dropped, no
// segment but the active one is left.
func TestCompletedOutputAfterRestart(t *testing.T) {
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
	first := segName(activeSeg(d).id)
	d.Close()

	d2 := open(t, dir)
	wantLen(t, d2, "j", "hello, world", true)
	wantLen(t, d2, "empty", "", true)
	for off, want := range map[int64]string{0: "hello, world", 7: "world", 12: ""} {
		c, err := d2.ReadAt(ctx, "j", off, 0)
		if err != nil || string(c.Data) != want || !c.Complete || c.Length != 12 {
			t.Fatalf("ReadAt(%d) = %q complete %v length %d, %v; want %q complete", off, c.Data, c.Complete, c.Length, err, want)
		}
	}
	if c, _ := d2.ReadAt(ctx, "j", 0, 5); c.Complete {
		t.Fatalf("a read short of the end says complete")
	}
	if err := d2.Wait(ctx, "j", 12); err != nil {
		t.Fatalf("Wait at the end of a complete output: %v", err)
	}
	if _, err := d2.Append(ctx, "j", 12, []byte("!")); !errors.Is(err, ErrComplete) {
		t.Fatalf("new bytes: %v, want %v", err, ErrComplete)
	}
	if got := dirNames(t, dir); !slices.Contains(got, first) {
		t.Fatalf("files %v: the first log's segment %s is gone while it holds output", got, first)
	}
	for _, job := range []string{"j", "empty"} {
		if err := d2.Drop(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
	if got := dirNames(t, dir); slices.Contains(got, first) || !slices.Contains(got, segName(activeSeg(d2).id)) {
		t.Fatalf("files %v after Drop, want the active segment %s and not the first log's %s", got, segName(activeSeg(d2).id), first)
	}
	wantLen(t, d2, "j", "", false)
}

// spec: FAIL-19
// A hub upgraded in place still serves the output its older self wrote,
// one file per job: <job>.out, read-only once complete, or an empty
// <job>.done beside it in the format before that. Open imports them all
// into the log and removes the files; a running job's output goes on
// growing; a second Open finds the same outputs.
func TestOldFormatReadable(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	big := strings.Repeat("0123456789abcdef", (maxRecordData+100)/16) // more than one record
	for name, content := range map[string]string{
		"done.out": "finished output", "done.done": "",
		"nooutput.done": "",
		"readonly.out":  "complete by mode",
		"running.out":   "half",
		"big.out":       big,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "readonly.out"), 0o400); err != nil {
		t.Fatal(err)
	}
	for pass := range 2 {
		d, err := Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range dirNames(t, dir) {
			if !strings.HasSuffix(name, segSuffix) {
				t.Fatalf("pass %d: %s left after the import", pass, name)
			}
		}
		wantLen(t, d, "done", "finished output", true)
		wantLen(t, d, "nooutput", "", true)
		wantLen(t, d, "readonly", "complete by mode", true)
		wantLen(t, d, "big", big, false)
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

// spec: NODE-12
// Appends that arrive while a group is being synced share the next
// group: ten jobs' chunks take two syncs, not ten, and none returns
// before its bytes are synced.
func TestAppendsShareASync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		dir := t.TempDir()
		d := open(t, dir)
		release := make(chan struct{})
		var mu sync.Mutex
		syncs := 0
		withSync(t, func(f *os.File) error {
			mu.Lock()
			syncs++
			first := syncs == 1
			mu.Unlock()
			if first {
				<-release
			}
			return f.Sync()
		})
		returned := make(chan string, 10)
		appendJob := func(i int) {
			job := fmt.Sprint("j", i)
			if _, err := d.Append(ctx, job, 0, []byte("output of "+job)); err != nil {
				t.Error(err)
			}
			returned <- job
		}
		go appendJob(0)
		synctest.Wait() // the writer holds j0's group in its sync
		for i := 1; i < 10; i++ {
			go appendJob(i)
		}
		synctest.Wait() // j1..j9 wait for the next group
		select {
		case job := <-returned:
			t.Fatalf("%s returned before its sync", job)
		default:
		}
		if n, _, _ := d.Len(ctx, "j0"); n != 0 {
			t.Fatalf("j0 readable (length %d) before its sync", n)
		}
		close(release)
		for range 10 {
			<-returned
		}
		if st := d.Stats(); st.Syncs != 2 || st.Groups != 2 || st.Appends != 10 {
			t.Fatalf("stats %+v, want 10 appends in 2 synced groups", st)
		}
		d.Close()
		d2 := open(t, dir)
		for i := range 10 {
			job := fmt.Sprint("j", i)
			wantLen(t, d2, job, "output of "+job, false)
		}
	})
}

// spec: NODE-12, FAIL-19
// A failed sync fails the appends of its group, which leave the length
// as it was; the writer moves to a new segment, the node's resend
// succeeds there, and after a restart the output is exact.
func TestFailedSyncFailsTheGroup(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := open(t, dir)
	if _, err := d.Append(ctx, "j", 0, []byte("acked;")); err != nil {
		t.Fatal(err)
	}
	first := activeSeg(d)
	fail := true
	withSync(t, func(f *os.File) error {
		if fail {
			fail = false
			return errors.New("injected sync failure")
		}
		return f.Sync()
	})
	if n, err := d.Append(ctx, "j", 6, []byte("lost")); err == nil {
		t.Fatalf("Append with a failed sync = %d, nil; want an error", n)
	}
	wantLen(t, d, "j", "acked;", false)
	if n, err := d.Append(ctx, "j", 6, []byte("resent")); err != nil || n != 12 {
		t.Fatalf("resend = %d, %v", n, err)
	}
	if activeSeg(d) == first {
		t.Fatal("the writer still appends to the segment whose sync failed")
	}
	d.Close()
	wantLen(t, open(t, dir), "j", "acked;resent", false)
}

// spec: API-41
// A long-running job's bytes, scattered over many segments among those
// of short jobs that are dropped, do not keep those segments: compaction
// moves them, and the log stays within four times what jobs own plus
// three segments: the active one, the one before it (never compacted),
// and one whose last drop has not yet reached the writer (the next group
// compacts it). The long job's output is exact, and stays so after a
// restart.
func TestCompactionBoundsTheLog(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	const segSize = 4 << 10
	d := openSized(t, dir, segSize)
	var long []byte
	for round := range 300 {
		line := []byte(fmt.Sprintf("round %04d of the long job\n", round))
		if _, err := d.Append(ctx, "long", int64(len(long)), line); err != nil {
			t.Fatal(err)
		}
		long = append(long, line...)
		for k := range 3 {
			job := fmt.Sprintf("short-%d-%d", round, k)
			if _, err := d.Append(ctx, job, 0, bytes.Repeat([]byte{'s'}, 700)); err != nil {
				t.Fatal(err)
			}
			d.MarkComplete(ctx, job)
			if err := d.Drop(ctx, job); err != nil {
				t.Fatal(err)
			}
		}
		st := d.Stats()
		if limit := 4*st.Live + 3*segSize; st.Bytes > limit {
			t.Fatalf("round %d: segments hold %d bytes for %d live (limit %d)", round, st.Bytes, st.Live, limit)
		}
	}
	st := d.Stats()
	if st.Compacted == 0 || st.Live != int64(len(long)) {
		t.Fatalf("stats %+v: want compaction, and live bytes = the long job's %d", st, len(long))
	}
	wantLen(t, d, "long", string(long), false)
	d.Close()
	d2 := openSized(t, dir, segSize)
	wantLen(t, d2, "long", string(long), false)
	for _, name := range dirNames(t, dir) {
		if strings.HasPrefix(name, "short") {
			t.Fatalf("%s in the directory", name)
		}
	}
	if n, _, _ := d2.Len(ctx, "short-0-0"); n != 0 {
		t.Fatalf("a dropped job came back with %d bytes", n)
	}
}

// FuzzReplay feeds arbitrary bytes as a segment: Open never fails on
// them or panics, every output it recovers reads back whole at its
// length, and a new chunk at that length is taken.
func FuzzReplay(f *testing.F) {
	var seed []byte
	seed, _ = appendRecord(seed, 0, recAppend, "a", 0, []byte("hello "))
	seed, _ = appendRecord(seed, 0, recAppend, "a", 6, []byte("world"))
	seed, _ = appendRecord(seed, 0, recComplete, "a", 0, nil)
	seed, _ = appendRecord(seed, 0, recAppend, "b", 0, []byte("dropped"))
	seed, _ = appendRecord(seed, 0, recDrop, "b", 0, nil)
	f.Add(seed)
	f.Add(seed[:len(seed)-3])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segName(0)), append([]byte(segMagic), body...), 0o600); err != nil {
			t.Fatal(err)
		}
		d, err := openLog(dir, nil, 4<<10)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer d.Close()
		d.mu.Lock()
		jobs := map[string]int64{}
		for job, j := range d.jobs {
			jobs[job] = j.length
		}
		d.mu.Unlock()
		ctx := context.Background()
		for job, n := range jobs {
			if got := readAll(t, d, job); int64(len(got)) != n {
				t.Fatalf("%s: read %d bytes, length %d", job, len(got), n)
			}
			if _, complete, _ := d.Len(ctx, job); !complete {
				if got, err := d.Append(ctx, job, n, []byte("x")); err != nil || got != n+1 {
					t.Fatalf("%s: Append at %d = %d, %v", job, n, got, err)
				}
			}
		}
	})
}

// BenchmarkJobOutput measures the output store's work for one job of
// vk-bench: a 4 KiB chunk, completion, a read of the whole output, and
// the drop at settle. Results: docs/benchmarks.md "hub/output".
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

// spec: NODE-12, API-37
// Jobs appended to, read, completed and dropped at once, on segments so
// small that every group rolls and compacts: each reader sees a prefix of
// its job's stream, and each job's output is its stream at the end.
func TestConcurrentJobsOnTinySegments(t *testing.T) {
	ctx := t.Context()
	d := openSized(t, t.TempDir(), 256)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(2)
		stream := bytes.Repeat([]byte(fmt.Sprintf("worker %d line\n", w)), 200)
		job := fmt.Sprint("keep-", w)
		go func() { // the writer of a job that stays, and of short jobs dropped
			defer wg.Done()
			for off := 0; off < len(stream); {
				n := min(len(stream)-off, 1+(off*7+w)%97)
				if _, err := d.Append(ctx, job, int64(off), stream[off:off+n]); err != nil {
					t.Error(err)
					return
				}
				off += n
				short := fmt.Sprintf("short-%d-%d", w, off)
				d.Append(ctx, short, 0, stream[:50])
				d.MarkComplete(ctx, short)
				d.Drop(ctx, short)
			}
			d.MarkComplete(ctx, job)
		}()
		go func() { // a reader following it
			defer wg.Done()
			for off := int64(0); ; {
				if err := d.Wait(ctx, job, off); err != nil {
					t.Error(err)
					return
				}
				c, err := d.ReadAt(ctx, job, off, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(c.Data, stream[off:off+int64(len(c.Data))]) {
					t.Errorf("%s: read at %d is not the stream", job, off)
					return
				}
				off += int64(len(c.Data))
				if c.Complete {
					return
				}
			}
		}()
	}
	wg.Wait()
	for w := range 6 {
		wantLen(t, d, fmt.Sprint("keep-", w), strings.Repeat(fmt.Sprintf("worker %d line\n", w), 200), true)
	}
	if st := d.Stats(); st.Compacted == 0 {
		t.Fatalf("stats %+v: want compaction under way", st)
	}
}

// BenchmarkOpen measures a hub start's replay of the log: 16,384 jobs'
// 4 KiB outputs (64 MiB) in 1 MiB groups. Reported per Open, and as the
// bytes replayed per second.
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	d, err := Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 4<<10)
	ctx := b.Context()
	const jobs = 16384
	var wg sync.WaitGroup
	for w := range 256 {
		wg.Go(func() {
			for i := w; i < jobs; i += 256 {
				if _, err := d.Append(ctx, fmt.Sprint("job", i), 0, chunk); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	d.Close()
	b.SetBytes(jobs * int64(len(chunk)))
	for b.Loop() {
		d, err := Open(dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		if n, _, _ := d.Len(ctx, "job7"); n != int64(len(chunk)) {
			b.Fatalf("job7 has %d bytes", n)
		}
		d.Close()
	}
}

// spec: FAIL-19, API-41
// A removed segment's file is reused for a later segment without being
// cleared: its old records name the old segment, so after a restart none
// of them is read as the new segment's, even where they line up with the
// new records (two jobs with records of one size). A dropped job stays
// dropped and the running job's output is exact.
func TestReusedSegmentKeepsNoOldRecords(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := openSized(t, dir, 4<<10)
	chunk := func(c byte) []byte { return bytes.Repeat([]byte{c}, 100) }
	for off := 0; off < 12000; off += 100 { // several segments' worth
		if _, err := d.Append(ctx, "old-job", int64(off), chunk('o')); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Drop(ctx, "old-job"); err != nil {
		t.Fatal(err)
	}
	var kept []byte
	for d.Stats().Reused < 2 {
		if len(kept) > 100000 {
			t.Fatalf("no segment reused: %+v", d.Stats())
		}
		if _, err := d.Append(ctx, "new-job", int64(len(kept)), chunk('n')); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, chunk('n')...)
	}
	sizes := map[uint64]int64{}
	d.mu.Lock()
	for id, s := range d.segs {
		sizes[id] = s.size
	}
	d.mu.Unlock()
	d.Close()
	d2 := openSized(t, dir, 4<<10)
	d2.mu.Lock()
	for id, s := range d2.segs {
		if want, ok := sizes[id]; ok && s.size != want {
			t.Errorf("segment %d replayed to %d bytes, written %d", id, s.size, want)
		}
	}
	d2.mu.Unlock()
	if n, _, _ := d2.Len(ctx, "old-job"); n != 0 {
		t.Fatalf("the dropped job came back with %d bytes", n)
	}
	wantLen(t, d2, "new-job", string(kept), false)
}

// Compaction leaves the segment before the active one alone (its jobs
// are mostly about to be settled) and compacts it once the writer has
// moved one segment further.
func TestCompactionWaitsOneSegment(t *testing.T) {
	ctx := t.Context()
	d := openSized(t, t.TempDir(), 4<<10)
	first := activeSeg(d).id
	if _, err := d.Append(ctx, "long", 0, bytes.Repeat([]byte("l"), 100)); err != nil {
		t.Fatal(err)
	}
	// fill fills the active segment with short jobs' output, dropped,
	// rolls to the next one, and waits for one more group there (a group
	// picks its copies before it is written).
	var tick int64
	fill := func() {
		t.Helper()
		defer func() {
			n, err := d.Append(ctx, "tick", tick, []byte("t"))
			if err != nil {
				t.Fatal(err)
			}
			tick = n
		}()
		start := activeSeg(d).id
		for i := 0; activeSeg(d).id == start; i++ {
			job := fmt.Sprint("short-", start, "-", i)
			if _, err := d.Append(ctx, job, 0, bytes.Repeat([]byte("s"), 500)); err != nil {
				t.Fatal(err)
			}
			if err := d.Drop(ctx, job); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill()
	if st := d.Stats(); st.Compacted != 0 {
		t.Fatalf("the segment just sealed was compacted: %+v", st)
	}
	fill()
	if st := d.Stats(); st.Compacted != 100 {
		t.Fatalf("stats %+v: want the long job's 100 bytes copied out of segment %d", st, first)
	}
	d.mu.Lock()
	_, kept := d.segs[first]
	d.mu.Unlock()
	if kept {
		t.Fatalf("segment %d still there after its last owned bytes were copied", first)
	}
	wantLen(t, d, "long", strings.Repeat("l", 100), false)
}
