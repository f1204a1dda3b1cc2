package spool

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"

	"github.com/vk-ci/vk/internal/deptest"
)

func open(t *testing.T, dir string, opt Options) *Spool {
	t.Helper()
	s, err := Open(dir, opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func appendAll(t *testing.T, s *Spool, p []byte) int64 {
	t.Helper()
	end, err := s.Append(t.Context(), p)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return end
}

// spec: NODE-11, NSESS-15
func TestAppendReadAck(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	if end := appendAll(t, s, []byte("hello ")); end != 6 {
		t.Fatalf("end = %d", end)
	}
	if end := appendAll(t, s, []byte("world")); end != 11 {
		t.Fatalf("end = %d", end)
	}
	if st := s.Status(); st.Synced != 0 {
		t.Fatalf("synced before any read = %d; appends are batched", st.Synced)
	}
	b, err := s.ReadFrom(0, 4)
	if err != nil || string(b) != "hell" {
		t.Fatalf("ReadFrom(0, 4) = %q %v", b, err)
	}
	if st := s.Status(); st.Synced != 11 {
		t.Fatalf("synced after a read = %d, want 11: bytes are synced before they are sent", st.Synced)
	}
	b, _ = s.ReadFrom(4, 100)
	if string(b) != "o world" {
		t.Fatalf("ReadFrom(4) = %q", b)
	}
	if b, err := s.ReadFrom(11, 100); err != nil || len(b) != 0 {
		t.Fatalf("ReadFrom at the end = %q %v, want empty", b, err)
	}
	if _, err := s.ReadFrom(12, 100); !errors.Is(err, ErrOffset) {
		t.Fatalf("ReadFrom past the end = %v", err)
	}
	if err := s.Ack(12); !errors.Is(err, ErrAckBeyond) {
		t.Fatalf("Ack past sent = %v", err)
	}
	if err := s.Ack(6); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(3); err != nil || s.Status().Acked != 6 {
		t.Fatalf("stale Ack moved the ack back: %+v %v", s.Status(), err)
	}
	// After a reconnect the sender resends from the hub's offset, even one
	// below what it had sent.
	if b, _ := s.ReadFrom(6, MaxChunk); string(b) != "world" {
		t.Fatalf("resend from ack = %q", b)
	}
}

// spec: NSESS-15
func TestChunkAndWindowCaps(t *testing.T) {
	s := open(t, t.TempDir(), Options{Limit: 3 * Window})
	data := bytes.Repeat([]byte("0123456789abcdef"), (2*Window)/16)
	appendAll(t, s, data)
	b, _ := s.ReadFrom(0, 10<<20)
	if len(b) != MaxChunk {
		t.Fatalf("chunk = %d bytes, want %d", len(b), MaxChunk)
	}
	// Nothing past Window beyond the last ack (0) is sent.
	b, _ = s.ReadFrom(Window-10, MaxChunk)
	if len(b) != 10 {
		t.Fatalf("chunk at the window's edge = %d bytes, want 10", len(b))
	}
	if b, _ := s.ReadFrom(Window, MaxChunk); len(b) != 0 {
		t.Fatalf("chunk past the window = %d bytes, want 0", len(b))
	}
	s.Ack(Window)
	if b, _ := s.ReadFrom(Window, MaxChunk); len(b) != MaxChunk || !bytes.Equal(b, data[Window:Window+MaxChunk]) {
		t.Fatalf("chunk after the ack = %d bytes", len(b))
	}
}

// spec: NODE-11
func TestBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := open(t, t.TempDir(), Options{})
		appendAll(t, s, make([]byte, Window-10))
		done := make(chan error, 1)
		go func() {
			_, err := s.Append(context.Background(), make([]byte, 20))
			done <- err
		}()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Append past 4 MiB unacked returned %v, want it blocked", err)
		default:
		}
		if _, err := s.ReadFrom(0, 100); err != nil {
			t.Fatal(err)
		}
		s.Ack(5) // not enough room yet: 15 bytes over
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Append returned %v with too little room", err)
		default:
		}
		s.Ack(10)
		synctest.Wait()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if st := s.Status(); st.Produced != Window+10 {
			t.Fatalf("produced = %d", st.Produced)
		}

		// A blocked producer returns when its ctx ends.
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			err := s.Reserve(ctx, 100)
			done <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Reserve after cancel = %v", err)
		}
		if err := s.Reserve(ctx, Window+1); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Reserve over the limit = %v", err)
		}
		// And when the spool closes.
		go func() { done <- s.Reserve(context.Background(), 100) }()
		synctest.Wait()
		s.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("Reserve after Close = %v", err)
		}
	})
}

// spec: NODE-13
func TestResultOnlyWhenAllAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := open(t, t.TempDir(), Options{})
		appendAll(t, s, []byte("abcdef"))
		done := make(chan error, 1)
		go func() { done <- s.WaitAllAcked(context.Background()) }()
		s.ReadFrom(0, MaxChunk)
		s.Ack(6) // all acked, but the output has not ended
		synctest.Wait()
		if s.AllAcked() {
			t.Fatal("AllAcked before Finish")
		}
		select {
		case <-done:
			t.Fatal("WaitAllAcked returned before Finish")
		default:
		}
		appendAll(t, s, []byte("gh"))
		if n, err := s.Finish(); err != nil || n != 8 {
			t.Fatalf("Finish = %d %v", n, err)
		}
		if _, err := s.Append(context.Background(), []byte("x")); !errors.Is(err, ErrClosed) {
			t.Fatalf("Append after Finish = %v", err)
		}
		synctest.Wait()
		if s.AllAcked() {
			t.Fatal("AllAcked with 2 bytes unacked")
		}
		s.Ack(8)
		synctest.Wait()
		if err := <-done; err != nil || !s.AllAcked() {
			t.Fatalf("WaitAllAcked = %v, AllAcked = %v", err, s.AllAcked())
		}
	})
}

// spec: NODE-11, FAIL-18
func TestReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "job-1")
	s := open(t, dir, Options{})
	appendAll(t, s, []byte("0123456789"))
	s.ReadFrom(0, MaxChunk)
	s.Ack(4)
	appendAll(t, s, []byte("abc")) // unsent, unsynced: still in the file
	s.Close()
	if _, err := s.ReadFrom(0, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadFrom after Close = %v", err)
	}

	s = open(t, dir, Options{})
	want := Status{Produced: 13, Synced: 13, Acked: 4}
	if st := s.Status(); st != want {
		t.Fatalf("Status after reopen = %+v, want %+v", st, want)
	}
	if b, _ := s.ReadFrom(4, MaxChunk); string(b) != "456789abc" {
		t.Fatalf("resend after reopen = %q", b)
	}
	s.Finish()
	s.Close()
	s = open(t, dir, Options{})
	if st := s.Status(); !st.Finished || st.OutputLen != 13 {
		t.Fatalf("Status after reopen of a finished spool = %+v", st)
	}
	for name, want := range map[string]os.FileMode{outputFile: 0o600, ackFile: 0o600, finishedFile: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v %v, want %v", name, fi.Mode(), err, want)
		}
	}
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir after Remove: %v", err)
	}
}

func TestTornAckFile(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	appendAll(t, s, []byte("0123456789"))
	s.ReadFrom(0, MaxChunk)
	s.Ack(7)
	s.Close()
	b, _ := os.ReadFile(filepath.Join(dir, ackFile))
	b[0] ^= 1
	os.WriteFile(filepath.Join(dir, ackFile), b, 0o600)
	s = open(t, dir, Options{})
	if st := s.Status(); st.Acked != 0 || st.Produced != 10 {
		t.Fatalf("Status with a torn ack = %+v, want acked 0 (resend all; the hub trims)", st)
	}
}

func TestReadySignal(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	select {
	case <-s.Ready():
		t.Fatal("Ready before any append")
	default:
	}
	appendAll(t, s, []byte("a"))
	appendAll(t, s, []byte("b")) // coalesces with the first
	<-s.Ready()
	select {
	case <-s.Ready():
		t.Fatal("two signals pending, want them coalesced")
	default:
	}
	s.Finish()
	<-s.Ready()
}

// TestDeps keeps the spool off the wire types: the session converts.
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/node/spool", "github.com/vk-ci/vk/proto/dispatch")
}
