package output

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vk-ci/vk/internal/testlog"
	"pgregory.net/rapid"
)

func open(t testing.TB, dir string) *Log {
	t.Helper()
	return openSized(t, dir, DefaultSegmentSize)
}

func openSized(t testing.TB, dir string, segSize int64) *Log {
	t.Helper()
	l, err := openLog(dir, testlog.New(t), segSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// impl is an output Store implementation under test; reopen, nil for
// stores without durable state, opens the store over dir again.
type impl struct {
	name   string
	new    func(t testing.TB, dir string) Store
	reopen func(dir string) (Store, error)
}

// tinySegment makes the writer start a new segment at almost every group
// and compact at once: the tests then cross segments, removals and
// compaction copies.
const tinySegment = 64

var impls = []impl{
	{"Log", func(t testing.TB, dir string) Store { return open(t, dir) },
		func(dir string) (Store, error) { return Open(dir, nil) }},
	{"LogTinySegments", func(t testing.TB, dir string) Store { return openSized(t, dir, tinySegment) },
		func(dir string) (Store, error) { return openLog(dir, nil, tinySegment) }},
	{"Mem", func(t testing.TB, _ string) Store {
		m := NewMem()
		t.Cleanup(func() { m.Close() })
		return m
	}, nil},
}

// forEach runs fn against every implementation.
func forEach(t *testing.T, fn func(t *testing.T, im impl)) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) { fn(t, im) })
	}
}

func readAll(t testing.TB, d Store, job string) []byte {
	t.Helper()
	var out []byte
	for off := int64(0); ; {
		c, err := d.ReadAt(context.Background(), job, off, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c.Data...)
		off += int64(len(c.Data))
		if off == c.Length {
			return out
		}
	}
}

// spec: NODE-12
func TestAppendTable(t *testing.T) { forEach(t, testAppendTable) }

func testAppendTable(t *testing.T, im impl) {
	ctx := t.Context()
	d := im.new(t, t.TempDir())
	steps := []struct {
		name    string
		offset  int64
		data    string
		wantLen int64
		wantErr error
		content string
	}{
		{"first", 0, "hello", 5, nil, "hello"},
		{"contiguous", 5, " world", 11, nil, "hello world"},
		{"duplicate", 5, " world", 11, nil, "hello world"},
		{"fully old", 0, "he", 11, nil, "hello world"},
		{"overlap trimmed", 6, "world!!", 13, nil, "hello world!!"},
		{"gap", 20, "x", 13, ErrGap, "hello world!!"},
		{"one past end is a gap", 14, "x", 13, ErrGap, "hello world!!"},
		{"negative offset", -1, "x", 0, ErrGap, "hello world!!"},
		{"empty at end", 13, "", 13, nil, "hello world!!"},
	}
	for _, s := range steps {
		n, err := d.Append(ctx, "job-1", s.offset, []byte(s.data))
		if s.wantErr == nil && err != nil || s.wantErr != nil && !errors.Is(err, s.wantErr) {
			t.Fatalf("%s: Append error %v, want %v", s.name, err, s.wantErr)
		}
		if s.wantErr == nil && n != s.wantLen {
			t.Fatalf("%s: Append = %d, want %d", s.name, n, s.wantLen)
		}
		if got := readAll(t, d, "job-1"); string(got) != s.content {
			t.Fatalf("%s: content %q, want %q", s.name, got, s.content)
		}
	}
}

// spec: API-37, API-38
func TestReadAt(t *testing.T) { forEach(t, testReadAt) }

func testReadAt(t *testing.T, im impl) {
	ctx := t.Context()
	d := im.new(t, t.TempDir())
	big := bytes.Repeat([]byte("0123456789abcdef"), (MaxRead+100)/16+1) // > 1 MiB
	if _, err := d.Append(ctx, "j", 0, big); err != nil {
		t.Fatal(err)
	}
	L := int64(len(big))
	tests := []struct {
		name         string
		offset       int64
		max          int
		complete     bool
		wantN        int
		wantComplete bool
		wantErr      error
	}{
		{"capped at 1 MiB", 0, 0, false, MaxRead, false, nil},
		{"max above cap", 0, 5 << 20, false, MaxRead, false, nil},
		{"small max", 10, 7, false, 7, false, nil},
		{"tail", L - 5, 0, false, 5, false, nil},
		{"at end", L, 0, false, 0, false, nil},
		{"past end", L + 1, 0, false, 0, false, ErrOffset},
		{"negative", -1, 0, false, 0, false, ErrOffset},
		{"complete, body not at end", 0, 0, true, MaxRead, false, nil},
		{"complete, body reaches end", L - 5, 0, true, 5, true, nil},
		{"complete, at end", L, 0, true, 0, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.complete {
				if err := d.MarkComplete(ctx, "j"); err != nil {
					t.Fatal(err)
				}
			}
			c, err := d.ReadAt(ctx, "j", tt.offset, tt.max)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ReadAt error %v, want %v", err, tt.wantErr)
				}
				if c.Length != L {
					t.Errorf("416 length %d, want %d", c.Length, L)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Data) != tt.wantN || c.Complete != tt.wantComplete || c.Length != L || c.Offset != tt.offset {
				t.Fatalf("ReadAt = {n %d, complete %v, length %d, offset %d}, want {n %d, complete %v, length %d, offset %d}",
					len(c.Data), c.Complete, c.Length, c.Offset, tt.wantN, tt.wantComplete, L, tt.offset)
			}
			if !bytes.Equal(c.Data, big[tt.offset:tt.offset+int64(tt.wantN)]) {
				t.Fatal("ReadAt returned the wrong bytes")
			}
		})
	}
	// A job with no output yet reads as empty.
	c, err := d.ReadAt(ctx, "none", 0, 0)
	if err != nil || c.Length != 0 || len(c.Data) != 0 || c.Complete {
		t.Fatalf("ReadAt(empty job) = %+v, %v", c, err)
	}
}

// spec: NODE-12
func TestCompleteRefusesNewBytes(t *testing.T) { forEach(t, testCompleteRefusesNewBytes) }

func testCompleteRefusesNewBytes(t *testing.T, im impl) {
	ctx := t.Context()
	d := im.new(t, t.TempDir())
	d.Append(ctx, "j", 0, []byte("abc"))
	if err := d.MarkComplete(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	if err := d.MarkComplete(ctx, "j"); err != nil {
		t.Fatalf("MarkComplete twice: %v", err)
	}
	if _, err := d.Append(ctx, "j", 0, []byte("abc")); err != nil {
		t.Fatalf("duplicate after complete: %v", err)
	}
	if _, err := d.Append(ctx, "j", 3, []byte("d")); !errors.Is(err, ErrComplete) {
		t.Fatalf("new bytes after complete: %v, want %v", err, ErrComplete)
	}
}

// spec: FAIL-19, API-39
// Output, its length and completeness survive a restart; a settled job's
// output is gone (API-41).
func TestRestartAndDrop(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := open(t, dir)
	d.Append(ctx, "j1", 0, []byte("first part;"))
	d.Append(ctx, "j1", 11, []byte("second"))
	d.MarkComplete(ctx, "j1")
	d.Append(ctx, "j2", 0, []byte("running"))
	d.Close()

	d2 := open(t, dir)
	for job, want := range map[string]struct {
		content  string
		complete bool
	}{"j1": {"first part;second", true}, "j2": {"running", false}} {
		n, complete, err := d2.Len(ctx, job)
		if err != nil || n != int64(len(want.content)) || complete != want.complete {
			t.Fatalf("%s: Len = %d, %v, %v; want %d, %v", job, n, complete, err, len(want.content), want.complete)
		}
		if got := readAll(t, d2, job); string(got) != want.content {
			t.Fatalf("%s: content %q, want %q", job, got, want.content)
		}
	}
	if n, err := d2.Append(ctx, "j2", 7, []byte(" on")); err != nil || n != 10 {
		t.Fatalf("Append after restart = %d, %v", n, err)
	}

	if err := d2.Drop(ctx, "j1"); err != nil {
		t.Fatal(err)
	}
	if err := d2.Drop(ctx, "j1"); err != nil {
		t.Fatalf("Drop twice: %v", err)
	}
	if n, complete, _ := d2.Len(ctx, "j1"); n != 0 || complete {
		t.Fatalf("dropped job Len = %d, %v", n, complete)
	}
	d2.Close()
	d3 := open(t, dir)
	if n, complete, _ := d3.Len(ctx, "j1"); n != 0 || complete {
		t.Fatalf("dropped job after a restart: Len = %d, %v", n, complete)
	}
	wantLen(t, d3, "j2", "running on", false)
}

// spec: FAIL-19, NODE-12
// A crash during a group's write leaves part of it at the end of the
// segment: a torn record, or whole records never acked. Replay ignores
// the torn record and takes whole ones (bytes the node sent at that
// offset); either way the node's resend from its last ack is trimmed to
// the new part, and the stream stays exact.
func TestTornTailRecovered(t *testing.T) {
	stream := []byte("line 1\nline 2\nline 3\nline 4\n")
	// Every test's log starts in an empty directory: its first segment
	// is number 0.
	rec, _ := appendRecord(nil, 0, recAppend, "j", 14, stream[14:])
	for _, cut := range []int{1, recHeader - 1, recHeader + 1, len(rec) - 1, len(rec)} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			d := open(t, dir)
			if _, err := d.Append(ctx, "j", 0, stream[:14]); err != nil { // acked: 14
				t.Fatal(err)
			}
			if activeSeg(d).id != 0 {
				t.Fatalf("first segment is %d", activeSeg(d).id)
			}
			seg, end := filepath.Join(dir, segName(activeSeg(d).id)), activeSeg(d).size
			d.Close()
			f, err := os.OpenFile(seg, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(rec[:cut], end) // over the segment's zeros
			f.Close()

			d2 := open(t, dir)
			want := int64(14)
			if cut == len(rec) {
				want = int64(len(stream))
			}
			wantLen(t, d2, "j", string(stream[:want]), false)
			if n, err := d2.Append(ctx, "j", 14, stream[14:]); err != nil || n != int64(len(stream)) {
				t.Fatalf("resend after crash = %d, %v", n, err)
			}
			if got := readAll(t, d2, "j"); !bytes.Equal(got, stream) {
				t.Fatalf("content %q, want %q", got, stream)
			}
			d2.Close()
			wantLen(t, open(t, dir), "j", string(stream), false)
		})
	}
}

func TestBadJobID(t *testing.T) { forEach(t, testBadJobID) }

func testBadJobID(t *testing.T, im impl) {
	d := im.new(t, t.TempDir())
	for _, id := range []string{"", "../x", "a/b", ".hidden", string(bytes.Repeat([]byte{'a'}, 129)), "a b"} {
		if _, err := d.Append(t.Context(), id, 0, []byte("x")); !errors.Is(err, ErrBadJob) {
			t.Errorf("Append(%q) = %v, want %v", id, err, ErrBadJob)
		}
	}
	if !ValidJob("job_01H.x-9") {
		t.Error("ValidJob refused a normal ID")
	}
}

// spec: API-37
// Wait wakes on growth past the offset, on completion, on drop, on
// context end and on Close, and returns at once when bytes are there.
func TestWait(t *testing.T) {
	forEach(t, func(t *testing.T, im impl) { synctest.Test(t, func(t *testing.T) { testWait(t, im) }) })
}

func testWait(t *testing.T, im impl) {
	ctx := t.Context()
	d := im.new(t, t.TempDir())
	d.Append(ctx, "j", 0, []byte("abc"))
	if err := d.Wait(ctx, "j", 2); err != nil {
		t.Fatalf("Wait below length: %v", err)
	}

	wake := func(name string, noop, act func()) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- d.Wait(ctx, "j", 3) }()
		synctest.Wait()
		if noop != nil {
			noop()
			synctest.Wait()
		}
		select {
		case err := <-done:
			t.Fatalf("%s: Wait returned %v before any change", name, err)
		default:
		}
		act()
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: Wait = %v", name, err)
			}
		default:
			t.Fatalf("%s: Wait did not wake", name)
		}
	}
	wake("growth (a duplicate does not wake)", func() {
		d.Append(ctx, "j", 0, []byte("abc"))
	}, func() {
		d.Append(ctx, "j", 3, []byte("d"))
	})
	d2 := im.new(t, t.TempDir())
	d2.Append(ctx, "j", 0, []byte("abc"))
	d = d2
	wake("complete", nil, func() { d.MarkComplete(ctx, "j") })

	d3 := im.new(t, t.TempDir())
	d3.Append(ctx, "j", 0, []byte("abc"))
	d = d3
	wake("drop", nil, func() { d.Drop(ctx, "j") })

	d3.Append(ctx, "k", 0, []byte("abc"))
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d3.Wait(cctx, "k", 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with timeout = %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- d3.Wait(ctx, "k", 3) }()
	synctest.Wait()
	d3.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait across Close = %v, want %v", err, ErrClosed)
	}
	if _, err := d3.Append(ctx, "k", 3, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
}

// spec: NODE-12
// Property: after any sequence of chunks cut from one byte stream —
// overlapping, repeated, out of order but never leaving a gap — and
// restarts in between, the output equals the stream's prefix of the
// output's length; every chunk that would leave a gap is refused and
// changes nothing.
func TestAppendProperty(t *testing.T) { forEach(t, testAppendProperty) }

func testAppendProperty(t *testing.T, im impl) {
	runs := 0
	rapid.Check(t, func(rt *rapid.T) {
		runs++
		job := fmt.Sprint("job-", runs) // a store may be shared across runs
		dir, err := os.MkdirTemp(t.TempDir(), "prop")
		if err != nil {
			rt.Fatal(err)
		}
		ctx := context.Background()
		var d Store
		if im.reopen != nil {
			if d, err = im.reopen(dir); err != nil {
				rt.Fatal(err)
			}
		} else {
			d = im.new(t, dir)
		}
		defer func() { d.Close() }()
		stream := rapid.SliceOfN(rapid.Byte(), 1, 3000).Draw(rt, "stream")
		var length int64
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		for i := range steps {
			if rapid.IntRange(0, 9).Draw(rt, "restart") == 0 && im.reopen != nil {
				d.Close()
				if d, err = im.reopen(dir); err != nil {
					rt.Fatal(err)
				}
			}
			off := rapid.Int64Range(0, int64(len(stream))).Draw(rt, "offset")
			n := rapid.Int64Range(0, int64(len(stream))-off).Draw(rt, "n")
			got, err := d.Append(ctx, job, off, stream[off:off+n])
			switch {
			case off > length:
				if !errors.Is(err, ErrGap) {
					rt.Fatalf("step %d: chunk [%d,%d) past length %d: err %v, want ErrGap", i, off, off+n, length, err)
				}
			case err != nil:
				rt.Fatalf("step %d: Append: %v", i, err)
			default:
				length = max(length, off+n)
				if got != length {
					rt.Fatalf("step %d: Append = %d, want %d", i, got, length)
				}
			}
			content := readAll(t, d, job)
			if !bytes.Equal(content, stream[:length]) {
				rt.Fatalf("step %d: output is not the stream's prefix of %d bytes", i, length)
			}
		}
	})
}

// BenchmarkAppend256K measures append+fsync throughput with the node's
// 256 KiB chunks (DECISIONS 12). Results: docs/benchmarks.md "hub/output".
func BenchmarkAppend256K(b *testing.B) {
	d := open(b, b.TempDir())
	chunk := bytes.Repeat([]byte("x"), 256<<10)
	b.SetBytes(int64(len(chunk)))
	var off int64
	ctx := context.Background()
	for b.Loop() {
		n, err := d.Append(ctx, "job", off, chunk)
		if err != nil {
			b.Fatal(err)
		}
		off = n
	}
}

// BenchmarkAppendJobs measures what the hub does per chunk of vk-bench's
// jobs: 4 KiB chunks, each durable before it returns, from 32 jobs in
// turn (serial: each append is its own group) or from 32 goroutines at
// once (parallel: appends share groups).
func BenchmarkAppendJobs(b *testing.B) {
	chunk := bytes.Repeat([]byte("x"), 4<<10)
	b.Run("serial", func(b *testing.B) {
		d := open(b, b.TempDir())
		b.SetBytes(int64(len(chunk)))
		var offs [32]int64
		ctx := context.Background()
		i := 0
		for b.Loop() {
			n, err := d.Append(ctx, fmt.Sprintf("job%d", i%32), offs[i%32], chunk)
			if err != nil {
				b.Fatal(err)
			}
			offs[i%32] = n
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		d := open(b, b.TempDir())
		b.SetBytes(int64(len(chunk)))
		b.SetParallelism(16) // 32 goroutines on 2 cores
		var next atomic.Int64
		ctx := context.Background()
		b.RunParallel(func(pb *testing.PB) {
			job := fmt.Sprintf("job%d", next.Add(1))
			var off int64
			for pb.Next() {
				n, err := d.Append(ctx, job, off, chunk)
				if err != nil {
					b.Error(err)
					return
				}
				off = n
			}
		})
		st := d.Stats()
		b.ReportMetric(float64(st.Appends)/float64(max(st.Syncs, 1)), "appends/sync")
	})
}
