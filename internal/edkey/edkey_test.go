package edkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"

	"pgregory.net/rapid"
)

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func rep(b byte) []byte {
	out := make([]byte, 32)
	for i := range out {
		out[i] = b
	}
	return out
}

// TestCheck refuses the identity, every point of small order (in the
// encodings libsodium's blocklist names), non-canonical encodings and
// non-points, and accepts real keys.
//
// spec: AUTH-06, AUTH-08, AUTH-13
func TestCheck(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	for _, tc := range []struct {
		name string
		key  []byte
		want error
	}{
		{"real key", pub, nil},
		{"all zeros (order 4)", rep(0), ErrSmallOrder},
		{"identity", mustHex("0100000000000000000000000000000000000000000000000000000000000000"), ErrSmallOrder},
		{"order 2 (0, -1)", mustHex("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"), ErrSmallOrder},
		{"order 4, x negative", mustHex("0000000000000000000000000000000000000000000000000000000000000080"), ErrSmallOrder},
		{"order 8 a", mustHex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a"), ErrSmallOrder},
		{"order 8 b", mustHex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa"), ErrSmallOrder},
		{"order 8 c", mustHex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"), ErrSmallOrder},
		{"order 8 d", mustHex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85"), ErrSmallOrder},
		{"0xff x 32", rep(0xff), ErrNonCanonical},
		{"identity plus p (y = p+1)", mustHex("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"), ErrNonCanonical},
		{"identity with the sign bit", mustHex("0100000000000000000000000000000000000000000000000000000000000080"), ErrNonCanonical},
		{"y = p (zero, non-canonical)", mustHex("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"), ErrNonCanonical},
		{"not on the curve (y = 2)", mustHex("0200000000000000000000000000000000000000000000000000000000000000"), ErrNotOnCurve},
		{"short", pub[:31], ErrSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for pass := range 2 { // worked out, then remembered
				err := Check(tc.key)
				if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
					t.Fatalf("pass %d: Check = %v, want %v", pass, err, tc.want)
				}
			}
		})
	}
}

// TestCheckAcceptsGenerated: every key crypto/ed25519 makes passes.
func TestCheckAcceptsGenerated(t *testing.T) {
	for range 200 {
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		if err := Check(pub); err != nil {
			t.Fatalf("Check(%x) = %v", pub, err)
		}
	}
}

// TestIdentityKeyForgery shows why the identity is refused: with it, a
// constant "signature" (R = identity, S = 0) verifies for any message.
func TestIdentityKeyForgery(t *testing.T) {
	id := mustHex("0100000000000000000000000000000000000000000000000000000000000000")
	sig := append(mustHex("0100000000000000000000000000000000000000000000000000000000000000"), make([]byte, 32)...)
	for _, m := range []string{"a", "any message at all"} {
		if !ed25519.Verify(id, []byte(m), sig) {
			t.Skipf("crypto/ed25519 refuses the identity forgery for %q; the check still refuses the key", m)
		}
	}
	if Check(id) == nil {
		t.Fatal("the identity key passes Check")
	}
}

func FuzzCheck(f *testing.F) {
	f.Add(rep(0))
	f.Add(rep(0xff))
	f.Fuzz(func(t *testing.T, b []byte) {
		if Check(b) == nil && len(b) != 32 {
			t.Fatalf("accepted %d bytes", len(b))
		}
	})
}

// A remembered verdict is the computed one, for any 32 bytes, also after
// the table started over.
func TestCheckRemembers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.Byte(), 32, 32).Draw(t, "key")
		want := check(b)
		for range 2 {
			if got := Check(b); got != want {
				t.Fatalf("Check(%x) = %v, want %v", b, got, want)
			}
		}
	})
	verdicts.Lock()
	for i := range maxVerdicts {
		var k [32]byte
		k[0], k[1], k[2] = byte(i), byte(i>>8), 0xaa
		verdicts.m[k] = ErrNotOnCurve // not what check says: only to fill it
	}
	verdicts.Unlock()
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	if err := Check(pub); err != nil {
		t.Fatalf("a real key after the table filled: %v", err)
	}
	verdicts.RLock()
	n := len(verdicts.m)
	verdicts.RUnlock()
	if n != 1 {
		t.Fatalf("%d verdicts after the table started over, want 1", n)
	}
}

// BenchmarkCheck: a key's first check (the arithmetic) against a
// remembered one (what the hub pays per signed request).
func BenchmarkCheck(b *testing.B) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			if err := check(pub); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remembered", func(b *testing.B) {
		for b.Loop() {
			if err := Check(pub); err != nil {
				b.Fatal(err)
			}
		}
	})
}
