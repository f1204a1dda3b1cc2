// Package edkey checks that an ed25519 public key is one a signature can
// honestly be bound to, before vk enrols it or trusts it from the store.
//
// crypto/ed25519 verifies against any 32 bytes. Some of them are weak:
// the identity point and the other points of small order (a "signature"
// made without any private key verifies against them for many messages,
// and with the identity a constant one verifies for every message), and
// non-canonical encodings (a second spelling of a point, which may also
// be one of those). [Check] refuses all of them, and bytes that are no
// point on the curve at all.
package edkey

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"math/big"
	"sync"
)

// Errors returned by [Check] (wrapped with detail).
var (
	// ErrSize: not 32 bytes.
	ErrSize = errors.New("edkey: an ed25519 public key is 32 bytes")
	// ErrNonCanonical: the encoding is not the point's one canonical form
	// (y not reduced below 2^255-19, or x = 0 with its sign bit set).
	ErrNonCanonical = errors.New("edkey: non-canonical point encoding")
	// ErrNotOnCurve: no curve point has this encoding.
	ErrNotOnCurve = errors.New("edkey: not a point of edwards25519")
	// ErrSmallOrder: the point's order divides 8 (the identity included).
	ErrSmallOrder = errors.New("edkey: small-order point")
)

var (
	fieldP = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	// curveD is -121665/121666 mod p.
	curveD = func() *big.Int {
		d := new(big.Int).ModInverse(big.NewInt(121666), fieldP)
		d.Mul(d, big.NewInt(-121665))
		return d.Mod(d, fieldP)
	}()
	// sqrtM1 is a square root of -1 mod p: 2^((p-1)/4).
	sqrtM1 = new(big.Int).Exp(big.NewInt(2), new(big.Int).Rsh(new(big.Int).Sub(fieldP, big.NewInt(1)), 2), fieldP)
)

// Check returns nil when pub is the canonical encoding of a curve point
// whose order does not divide 8, else an error wrapping one of ErrSize,
// ErrNonCanonical, ErrNotOnCurve or ErrSmallOrder.
//
// The verdict depends on the 32 bytes only, and the hub checks the same
// few stored keys on every signed request, so verdicts are remembered
// (up to [maxVerdicts] keys; the table starts over when full): a key is
// worked out once (about 0.1 ms of big-number arithmetic), then looked up.
func Check(pub []byte) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w (got %d)", ErrSize, len(pub))
	}
	k := [ed25519.PublicKeySize]byte(pub)
	verdicts.RLock()
	err, ok := verdicts.m[k]
	verdicts.RUnlock()
	if ok {
		return err
	}
	err = check(pub)
	verdicts.Lock()
	if len(verdicts.m) >= maxVerdicts {
		clear(verdicts.m)
	}
	verdicts.m[k] = err
	verdicts.Unlock()
	return err
}

// maxVerdicts bounds the remembered verdicts (about 60 B each).
const maxVerdicts = 1 << 14

var verdicts = struct {
	sync.RWMutex
	m map[[ed25519.PublicKeySize]byte]error
}{m: map[[ed25519.PublicKeySize]byte]error{}}

// check is Check's arithmetic, on 32 bytes.
func check(pub []byte) error {
	x, y, err := decode(pub)
	if err != nil {
		return err
	}
	// [8]P by three doublings; the identity means P's order divides 8.
	for range 3 {
		x, y = add(x, y, x, y)
	}
	if x.Sign() == 0 && y.Cmp(big.NewInt(1)) == 0 {
		return ErrSmallOrder
	}
	return nil
}

// decode returns the affine point encoded by b (RFC 8032 section 5.1.3),
// refusing non-canonical encodings.
func decode(b []byte) (x, y *big.Int, err error) {
	le := make([]byte, 32)
	for i := range 32 {
		le[31-i] = b[i] // big-endian for math/big
	}
	sign := le[0] >> 7
	le[0] &= 0x7f
	y = new(big.Int).SetBytes(le)
	if y.Cmp(fieldP) >= 0 {
		return nil, nil, fmt.Errorf("%w: y not below 2^255-19", ErrNonCanonical)
	}
	// x^2 = (y^2 - 1) / (d y^2 + 1)
	y2 := new(big.Int).Mul(y, y)
	u := new(big.Int).Sub(y2, big.NewInt(1))
	u.Mod(u, fieldP)
	v := new(big.Int).Mul(curveD, y2)
	v.Add(v, big.NewInt(1)).Mod(v, fieldP)
	x2 := new(big.Int).Mul(u, new(big.Int).ModInverse(v, fieldP))
	x2.Mod(x2, fieldP)
	if x2.Sign() == 0 {
		if sign == 1 {
			return nil, nil, fmt.Errorf("%w: x = 0 with the sign bit set", ErrNonCanonical)
		}
		return new(big.Int), y, nil
	}
	// Candidate root x2^((p+3)/8); fix it with sqrt(-1) when needed.
	x = new(big.Int).Exp(x2, new(big.Int).Rsh(new(big.Int).Add(fieldP, big.NewInt(3)), 3), fieldP)
	if sq := new(big.Int).Mul(x, x); sq.Mod(sq, fieldP).Cmp(x2) != 0 {
		x.Mul(x, sqrtM1).Mod(x, fieldP)
		if sq := new(big.Int).Mul(x, x); sq.Mod(sq, fieldP).Cmp(x2) != 0 {
			return nil, nil, ErrNotOnCurve
		}
	}
	if uint(x.Bit(0)) != uint(sign) {
		x.Sub(fieldP, x)
	}
	return x, y, nil
}

// add returns P1 + P2 with the complete twisted Edwards addition law
// (a = -1), valid for doubling too.
func add(x1, y1, x2, y2 *big.Int) (*big.Int, *big.Int) {
	x1y2 := new(big.Int).Mul(x1, y2)
	y1x2 := new(big.Int).Mul(y1, x2)
	y1y2 := new(big.Int).Mul(y1, y2)
	x1x2 := new(big.Int).Mul(x1, x2)
	t := new(big.Int).Mul(curveD, new(big.Int).Mul(x1x2, y1y2))
	t.Mod(t, fieldP)
	nx := new(big.Int).Add(x1y2, y1x2)
	dx := new(big.Int).Add(big.NewInt(1), t)
	ny := new(big.Int).Add(y1y2, x1x2)
	dy := new(big.Int).Sub(big.NewInt(1), t)
	dy.Mod(dy, fieldP)
	nx.Mul(nx, new(big.Int).ModInverse(dx.Mod(dx, fieldP), fieldP)).Mod(nx, fieldP)
	ny.Mul(ny, new(big.Int).ModInverse(dy, fieldP)).Mod(ny, fieldP)
	return nx, ny
}
