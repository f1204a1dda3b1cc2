package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
)

// spec: AUTH-13
// Enrolled principals keep their key; a removed one stays listed, marked.
func testPrincipals(t *testing.T, su suite[PrincipalsStore]) {
	s := su.open(t)
	ctx := su.ctx
	key := []byte("0123456789abcdef0123456789abcdef")
	p := store.Principal{ID: "relay-1", Kind: store.KindRelay, PublicKey: key, Name: "gl-relay-a", Created: T0}
	n := store.Principal{ID: "node-1", Kind: store.KindNode, PublicKey: []byte("fedcba9876543210fedcba9876543210"), Name: "n1", Created: T0}
	wantErr(t, "CreatePrincipal", s.CreatePrincipal(ctx, p), nil)
	wantErr(t, "CreatePrincipal", s.CreatePrincipal(ctx, n), nil)
	wantErr(t, "CreatePrincipal duplicate", s.CreatePrincipal(ctx, p), store.ErrConflict)
	key[0] = 'X'
	p.PublicKey = []byte("0123456789abcdef0123456789abcdef")
	s = su.restart(t, s)
	got, err := s.GetPrincipal(ctx, "relay-1")
	wantErr(t, "GetPrincipal", err, nil)
	diff(t, "GetPrincipal", p, got)
	_, err = s.GetPrincipal(ctx, "relay-9")
	wantErr(t, "GetPrincipal unknown", err, store.ErrNotFound)
	wantErr(t, "RemovePrincipal", s.RemovePrincipal(ctx, "relay-1", T0.Add(time.Hour)), nil)
	wantErr(t, "RemovePrincipal again", s.RemovePrincipal(ctx, "relay-1", T0.Add(2*time.Hour)), nil)
	wantErr(t, "RemovePrincipal unknown", s.RemovePrincipal(ctx, "relay-9", T0), store.ErrNotFound)
	s = su.restart(t, s)
	got, _ = s.GetPrincipal(ctx, "relay-1")
	p.Removed, p.RemovedAt = true, T0.Add(time.Hour)
	diff(t, "removed principal", p, got)
	all, _ := s.ListPrincipals(ctx)
	diff(t, "ListPrincipals", []store.Principal{n, p}, all)
}

// One-time enrolment tokens: used once, never after expiry, only for
// their kind; only the hash is kept.
func testTokens(t *testing.T, su suite[PrincipalsStore]) {
	s := su.open(t)
	ctx := su.ctx
	h1, h2, h3 := store.Sum([]byte("tok-1")), store.Sum([]byte("tok-2")), store.Sum([]byte("tok-3"))
	t1 := store.Token{Hash: h1, Kind: store.KindRelay, Created: T0, Expires: T0.Add(time.Hour)}
	t2 := store.Token{Hash: h2, Kind: store.KindNode, Created: T0.Add(time.Second), Expires: T0.Add(time.Hour)}
	t3 := store.Token{Hash: h3, Kind: store.KindRelay, Created: T0.Add(2 * time.Second), Expires: T0.Add(time.Minute)}
	for _, tok := range []store.Token{t1, t2, t3} {
		wantErr(t, "CreateToken", s.CreateToken(ctx, tok), nil)
	}
	wantErr(t, "CreateToken duplicate", s.CreateToken(ctx, t1), store.ErrConflict)
	s = su.restart(t, s)

	_, err := s.UseToken(ctx, store.Sum([]byte("nope")), store.KindRelay, "relay-1", T0)
	wantErr(t, "UseToken unknown", err, store.ErrNotFound)
	_, err = s.UseToken(ctx, h2, store.KindRelay, "relay-1", T0)
	wantErr(t, "UseToken other kind", err, store.ErrNotFound)
	_, err = s.UseToken(ctx, h3, store.KindRelay, "relay-1", T0.Add(time.Minute))
	wantErr(t, "UseToken expired", err, store.ErrExpired)
	got, err := s.UseToken(ctx, h1, store.KindRelay, "relay-1", T0.Add(time.Second))
	wantErr(t, "UseToken", err, nil)
	want := t1
	want.Used, want.UsedBy, want.UsedAt = true, "relay-1", T0.Add(time.Second)
	diff(t, "UseToken", want, got)
	s = su.restart(t, s)
	_, err = s.UseToken(ctx, h1, store.KindRelay, "relay-2", T0.Add(2*time.Second))
	wantErr(t, "UseToken again", err, store.ErrConflict)
	all, _ := s.ListTokens(ctx)
	diff(t, "ListTokens", []store.Token{want, t2, t3}, all)
}

// A token used concurrently enrolls exactly one principal.
func testTokenConcurrent(t *testing.T, su suite[PrincipalsStore]) {
	s := su.open(t)
	ctx := su.ctx
	h := store.Sum([]byte("tok"))
	wantErr(t, "CreateToken", s.CreateToken(ctx, store.Token{Hash: h, Kind: store.KindNode, Created: T0, Expires: T0.Add(time.Hour)}), nil)
	var wg sync.WaitGroup
	results := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			_, err := s.UseToken(ctx, h, store.KindNode, fmt.Sprintf("node-%d", i), T0)
			results <- err
		})
	}
	wg.Wait()
	close(results)
	ok := 0
	for err := range results {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("UseToken: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d concurrent uses succeeded, want 1", ok)
	}
}

// Principals and tokens without their keys are refused.
func testPrincipalsInvalid(t *testing.T, su suite[PrincipalsStore]) {
	s := su.open(t)
	wantErr(t, "CreatePrincipal no ID", s.CreatePrincipal(su.ctx, store.Principal{}), store.ErrInvalid)
	wantErr(t, "CreateToken no hash", s.CreateToken(su.ctx, store.Token{}), store.ErrInvalid)
}
