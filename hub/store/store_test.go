package store

import (
	"errors"
	"testing"
	"time"
)

func TestHashText(t *testing.T) {
	h := Sum([]byte("abc"))
	b, _ := h.MarshalText()
	if string(b) != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("MarshalText = %s", b)
	}
	var back Hash
	if err := back.UnmarshalText(b); err != nil || back != h {
		t.Fatalf("UnmarshalText = %x, %v", back, err)
	}
	for _, bad := range []string{"", "zz", string(b[:62]) + "zz"} {
		if err := back.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("UnmarshalText(%q) accepted", bad)
		}
	}
}

// spec: API-42
func TestAnswerExpired(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		a    Answer
		now  time.Time
		want bool
	}{
		{"fresh", Answer{Created: t0}, t0, false},
		{"just before a day", Answer{Created: t0}, t0.Add(AnswerTTL - time.Nanosecond), false},
		{"a day", Answer{Created: t0}, t0.Add(AnswerTTL), true},
		{"dropped", Answer{Created: t0, Dropped: true}, t0, true},
	}
	for _, tt := range tests {
		if got := tt.a.Expired(tt.now); got != tt.want {
			t.Errorf("%s: Expired = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestOpenUnknown(t *testing.T) {
	if _, err := Open(t.Context(), "pg:host=x"); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("Open = %v, want %v", err, ErrUnknownKind)
	}
}
