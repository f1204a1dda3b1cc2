package testlog

import "testing"

func TestNewLogsAndSurvivesCleanup(t *testing.T) {
	var log = New(t)
	log.Info("hello", "k", "v")
	Discard().Info("dropped")
}

func TestBufferCollectsConcurrentWrites(t *testing.T) {
	var b Buffer
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 100 {
				b.Write([]byte("x"))
			}
		}()
	}
	for range 4 {
		<-done
	}
	if n := len(b.String()); n != 400 {
		t.Fatalf("buffer holds %d bytes, want 400", n)
	}
}

func TestWatchingClosesOnceSeen(t *testing.T) {
	b := Watching("hello")
	b.Write([]byte("hel"))
	select {
	case <-b.Seen():
		t.Fatal("Seen closed before the string was written")
	default:
	}
	b.Write([]byte("lo world"))
	b.Write([]byte(" hello again")) // a second match must not close twice
	select {
	case <-b.Seen():
	default:
		t.Fatal("Seen not closed after the string was written")
	}
}
