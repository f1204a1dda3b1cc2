package wsconn

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

func push(t testing.TB, o *Outbox) (uint64, error) {
	return o.Push(func(seq uint64) ([]byte, error) { return []byte(fmt.Sprint(seq)), nil })
}

func TestOutboxBasics(t *testing.T) {
	o := NewOutbox(3)
	for want := uint64(1); want <= 3; want++ {
		if seq, err := push(t, o); err != nil || seq != want {
			t.Fatalf("Push = %d, %v; want %d", seq, err, want)
		}
	}
	if _, err := push(t, o); !errors.Is(err, ErrOverflow) {
		t.Fatalf("4th unwritten Push = %v, want ErrOverflow", err)
	}
	ctx := context.Background()
	for want := uint64(1); want <= 2; want++ {
		b, seq, err := o.Next(ctx)
		if err != nil || seq != want || string(b) != fmt.Sprint(want) {
			t.Fatalf("Next = %q %d %v; want seq %d", b, seq, err, want)
		}
	}
	// Two written, one unwritten: two more fit, evicting the oldest.
	for range 2 {
		if _, err := push(t, o); err != nil {
			t.Fatal(err)
		}
	}
	if o.CanRewind(0) || o.CanRewind(1) {
		t.Fatal("CanRewind reaches evicted frames")
	}
	if err := o.Rewind(2); err != nil {
		t.Fatalf("Rewind(2) = %v", err)
	}
	if _, seq, _ := o.Next(ctx); seq != 3 {
		t.Fatalf("after Rewind(2) Next seq = %d, want 3", seq)
	}
	if err := o.Rewind(9); !errors.Is(err, ErrCannotResume) {
		t.Fatalf("Rewind(beyond) = %v", err)
	}
	o.Reset()
	if seq, _ := push(t, o); seq != 1 {
		t.Fatalf("after Reset seq = %d, want 1", seq)
	}
	o.Close()
	if _, _, err := o.Next(ctx); !errors.Is(err, ErrOutboxClosed) {
		t.Fatalf("Next after Close = %v", err)
	}
	if _, err := push(t, o); !errors.Is(err, ErrOutboxClosed) {
		t.Fatalf("Push after Close = %v", err)
	}
}

// Written frames are kept for replay up to the byte bound, oldest
// evicted first; frames not yet written are kept whatever their size, so
// the writer never misses one. (STYLE C6's resumable stream; a resume
// past the retention starts a new session, ErrCannotResume.)
func TestOutboxRetainsBytes(t *testing.T) {
	o := NewOutboxRetaining(100, 10<<10) // 10 KiB of written frames
	big := func(seq uint64) ([]byte, error) { return make([]byte, 4<<10), nil }
	for range 5 { // 20 KiB unwritten: all kept
		if _, err := o.Push(big); err != nil {
			t.Fatal(err)
		}
	}
	if !o.CanRewind(0) {
		t.Fatal("unwritten frames were evicted")
	}
	ctx := context.Background()
	for want := uint64(1); want <= 5; want++ {
		if _, seq, err := o.Next(ctx); err != nil || seq != want {
			t.Fatalf("Next = %d, %v; want %d", seq, err, want)
		}
	}
	// All written: only the last 2 frames (8 KiB) fit in 10 KiB.
	if o.CanRewind(2) || !o.CanRewind(3) {
		t.Errorf("after writing 5 frames of 4 KiB: CanRewind(2) = %v, CanRewind(3) = %v; want false, true", o.CanRewind(2), o.CanRewind(3))
	}
	if err := o.Rewind(3); err != nil {
		t.Fatal(err)
	}
	for want := uint64(4); want <= 5; want++ {
		if b, seq, err := o.Next(ctx); err != nil || seq != want || len(b) != 4<<10 {
			t.Fatalf("replay Next = %d bytes seq %d, %v; want seq %d", len(b), seq, err, want)
		}
	}
	// Default outboxes bound retention too.
	if d := NewOutbox(8); d.retain != DefaultRetainBytes {
		t.Errorf("NewOutbox retains %d bytes, want %d", d.retain, DefaultRetainBytes)
	}
}

// Property: whatever the interleaving of pushes, writes, rewinds and
// resets, the writer sees frames in seq order, a rewind replays exactly
// the frames after the peer's last seq with their original bytes, and a
// push fails only when Cap frames wait unwritten.
func TestOutboxProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.IntRange(1, 8).Draw(t, "cap")
		o := NewOutbox(capacity)
		sent := map[uint64][]byte{} // every frame pushed in this session, by seq
		var next, cursor uint64 = 1, 0
		ctx := context.Background()
		for i := range rapid.IntRange(1, 60).Draw(t, "ops") {
			switch rapid.IntRange(0, 9).Draw(t, fmt.Sprint("op", i)) {
			case 0, 1, 2, 3:
				payload := []byte(rapid.String().Draw(t, "payload"))
				seq, err := o.Push(func(s uint64) ([]byte, error) { return append([]byte(nil), payload...), nil })
				unwritten := next - 1 - cursor
				if int(unwritten) >= capacity {
					if !errors.Is(err, ErrOverflow) {
						t.Fatalf("Push with %d unwritten (cap %d) = %v, want overflow", unwritten, capacity, err)
					}
					continue
				}
				if err != nil || seq != next {
					t.Fatalf("Push = %d, %v; want %d", seq, err, next)
				}
				sent[seq] = payload
				next++
			case 4, 5, 6:
				if cursor+1 == next {
					continue // Next would block
				}
				b, seq, err := o.Next(ctx)
				if err != nil || seq != cursor+1 || string(b) != string(sent[seq]) {
					t.Fatalf("Next = %q %d %v; want seq %d %q", b, seq, err, cursor+1, sent[cursor+1])
				}
				cursor = seq
			case 7, 8:
				last := uint64(rapid.IntRange(0, int(next)).Draw(t, "peerLast"))
				oldest := max(uint64(1), next-uint64(min(int(next-1), capacity)))
				can := last < next && last+1 >= oldest
				err := o.Rewind(last)
				if can != (err == nil) {
					t.Fatalf("Rewind(%d) with next %d oldest %d = %v", last, next, oldest, err)
				}
				if err == nil {
					cursor = last
				}
			case 9:
				o.Reset()
				clear(sent)
				next, cursor = 1, 0
			}
			if got := o.Unwritten(); got != int(next-1-cursor) {
				t.Fatalf("Unwritten = %d, want %d", got, next-1-cursor)
			}
		}
	})
}
