package output

import (
	"fmt"
	"strings"
	"testing"
)

// spec: NODE-12, API-41
// Jobs' files stay open between appends, never more than maxOpen at once;
// the least recently used one is closed to make room, a job whose file
// was closed reopens it, and Drop and Close close them all. Every job's
// output stays exact throughout.
func TestKeptFilesBounded(t *testing.T) {
	ctx := t.Context()
	d := open(t, t.TempDir())
	d.maxOpen = 3
	want := map[string]*strings.Builder{}
	for round := range 4 {
		for i := range 10 {
			job := fmt.Sprintf("j%d", i)
			if want[job] == nil {
				want[job] = &strings.Builder{}
			}
			b := want[job]
			part := fmt.Sprintf("round %d of %s;", round, job)
			if _, err := d.Append(ctx, job, int64(b.Len()), []byte(part)); err != nil {
				t.Fatal(err)
			}
			b.WriteString(part)
			if n := d.NumOpen(); n > 3 {
				t.Fatalf("%d files open, want at most 3", n)
			}
		}
	}
	if n := d.NumOpen(); n != 3 {
		t.Fatalf("%d files open after 40 appends, want 3 kept", n)
	}
	for job, b := range want {
		if got := readAll(t, d, job); string(got) != b.String() {
			t.Fatalf("%s: %q, want %q", job, got, b.String())
		}
	}
	for i := range 5 {
		if err := d.Drop(ctx, fmt.Sprintf("j%d", 9-i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := d.NumOpen(); n > 3 {
		t.Fatalf("%d files open after drops", n)
	}
	d.Close()
	if n := d.NumOpen(); n != 0 {
		t.Fatalf("%d files open after Close, want 0", n)
	}
	for _, j := range d.jobs {
		if j.f != nil {
			t.Fatal("a job still holds its file after Close")
		}
	}
}

// spec: NODE-12
// A kept file whose job an operation holds is not closed under it: the
// newcomer then opens its own file for that operation only.
func TestKeptFileBusyNotEvicted(t *testing.T) {
	ctx := t.Context()
	d := open(t, t.TempDir())
	d.maxOpen = 1
	if _, err := d.Append(ctx, "a", 0, []byte("a1")); err != nil {
		t.Fatal(err)
	}
	a := d.jobs["a"]
	a.mu.Lock() // an operation on a under way
	if _, err := d.Append(ctx, "b", 0, []byte("b1")); err != nil {
		t.Fatal(err)
	}
	if a.f == nil || d.jobs["b"].f != nil || d.NumOpen() != 1 {
		t.Fatalf("busy a's file closed or b's kept: a %v, b %v, open %d", a.f, d.jobs["b"].f, d.NumOpen())
	}
	a.mu.Unlock()
	if _, err := d.Append(ctx, "b", 2, []byte("b2")); err != nil {
		t.Fatal(err)
	}
	if a.f != nil || d.jobs["b"].f == nil || d.NumOpen() != 1 {
		t.Fatalf("idle a's file not replaced by b's: a %v, b %v, open %d", a.f, d.jobs["b"].f, d.NumOpen())
	}
	for job, want := range map[string]string{"a": "a1", "b": "b1b2"} {
		if got := readAll(t, d, job); string(got) != want {
			t.Fatalf("%s: %q, want %q", job, got, want)
		}
	}
}
