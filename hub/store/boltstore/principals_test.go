package boltstore

import (
	"context"
	"crypto/ed25519"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/hub/store"
)

var principalTime = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// openPrincipals opens a store holding one enrolled relay, "relay-1".
func openPrincipals(t *testing.T) (*Store, store.Principal) {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "hub.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p := store.Principal{ID: "relay-1", Kind: store.KindRelay, PublicKey: make([]byte, ed25519.PublicKeySize), Created: principalTime}
	p.PublicKey[0] = 7
	if err := s.CreatePrincipal(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return s, p
}

// A principal read once is remembered, yet its removal is what the very
// next read returns: the hub refuses a removed relay's next request
// (AUTH-13), although it no longer reads the file for every request.
//
// spec: AUTH-13
func TestPrincipalRemovedReadAtOnce(t *testing.T) {
	s, p := openPrincipals(t)
	ctx := t.Context()
	for range 2 { // the second read is the remembered record
		got, err := s.GetPrincipal(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(p, got); diff != "" {
			t.Fatalf("GetPrincipal (-want +got):\n%s", diff)
		}
	}
	if err := s.RemovePrincipal(ctx, p.ID, principalTime.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetPrincipal(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Removed || !got.RemovedAt.Equal(principalTime.Add(time.Minute)) {
		t.Fatalf("GetPrincipal after the removal = %+v, want removed at %s", got, principalTime.Add(time.Minute))
	}
	// A remembered record is the caller's own copy.
	got.PublicKey[0] = 99
	again, _ := s.GetPrincipal(ctx, p.ID)
	if again.PublicKey[0] != 7 {
		t.Fatalf("a caller's change to the returned key reached the store: key[0] = %d", again.PublicKey[0])
	}
	// A closed store answers ErrClosed, remembered record or not.
	s.Close()
	if _, err := s.GetPrincipal(ctx, p.ID); err == nil {
		t.Fatal("GetPrincipal on a closed store succeeded")
	}
}

// A read that began before a removal cannot put its older record back
// after the removal forgot it: the memo refuses records read before the
// last forget (the interleaving is played step by step).
func TestPrincipalMemoStaleReadRefused(t *testing.T) {
	var pm principalMemo
	p := store.Principal{ID: "relay-1", Kind: store.KindRelay}
	gen := pm.generation() // a read begins
	pm.forget(p.ID)        // a removal commits and forgets
	pm.put(p, gen)         // the read, older than the removal, ends
	if got, ok := pm.get(p.ID); ok {
		t.Fatalf("the memo kept %+v, read before the removal", got)
	}
	pm.put(p, pm.generation()) // a read begun after the removal
	if _, ok := pm.get(p.ID); !ok {
		t.Fatal("a read begun after the last forget was not remembered")
	}
}

// Readers racing a removal: every read that begins after RemovePrincipal
// returned sees the principal removed, however many reads were under way
// (run with -race).
func TestPrincipalRemovalRacingReads(t *testing.T) {
	s, p := openPrincipals(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var removed atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				after := removed.Load()
				got, err := s.GetPrincipal(ctx, p.ID)
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				if after && !got.Removed {
					t.Error("a read begun after RemovePrincipal returned saw the principal enrolled")
					return
				}
			}
		})
	}
	if err := s.RemovePrincipal(ctx, p.ID, principalTime); err != nil {
		t.Fatal(err)
	}
	removed.Store(true)
	for range 100 {
		got, err := s.GetPrincipal(ctx, p.ID)
		if err != nil || !got.Removed {
			t.Fatalf("GetPrincipal after the removal = %+v, %v", got, err)
		}
	}
	cancel()
	wg.Wait()
}
