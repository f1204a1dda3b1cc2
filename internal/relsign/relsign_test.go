package relsign

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/vk-ci/vk/proto/client"
)

func keys(t *testing.T) ([]byte, []byte) {
	t.Helper()
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// A release verifies with its key; a flipped byte, another key, a missing
// or mangled signature, another release name and a wrong size are each
// refused with their own error.
//
// spec: OPS-04
func TestCheck(t *testing.T) {
	pubPEM, privPEM := keys(t)
	otherPEM, _ := keys(t)
	pub, err := ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ParsePublicKey(otherPEM)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ParsePrivateKey(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	bin := bytes.Repeat([]byte("vk-gitlab binary "), 1000)
	sum, n, err := Digest(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	good := client.Update{Release: "0.5.0", SHA256: sum, Size: n, Signature: Sign(priv, "0.5.0", sum)}
	flipped := bytes.Clone(bin)
	flipped[len(flipped)/2] ^= 1
	flipSum, _, _ := Digest(bytes.NewReader(flipped))

	for _, tc := range []struct {
		name    string
		pub     []byte
		u       func(client.Update) client.Update
		bytes   []byte
		wantErr error
	}{
		{"good", pub, nil, bin, nil},
		{"flipped byte", pub, nil, flipped, ErrDigest},
		{"wrong key", other, nil, bin, ErrSignature},
		{"missing signature", pub, func(u client.Update) client.Update { u.Signature = ""; return u }, bin, ErrNoSignature},
		{"mangled signature", pub, func(u client.Update) client.Update { u.Signature = "AAAA"; return u }, bin, ErrSignature},
		{"signature of another release", pub, func(u client.Update) client.Update { u.Release = "0.5.1"; return u }, bin, ErrSignature},
		{"announced digest of other bytes", pub, func(u client.Update) client.Update {
			u.SHA256, u.Signature = flipSum, Sign(priv, u.Release, flipSum)
			return u
		}, bin, ErrDigest},
		{"wrong size", pub, func(u client.Update) client.Update { u.Size++; return u }, bin, ErrSize},
		{"no size stated", pub, func(u client.Update) client.Update { u.Size = 0; return u }, bin, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := good
			if tc.u != nil {
				u = tc.u(u)
			}
			gotSum, gotN, err := Digest(bytes.NewReader(tc.bytes))
			if err != nil {
				t.Fatal(err)
			}
			err = Check(tc.pub, u, gotSum, gotN)
			if tc.wantErr == nil && err != nil {
				t.Fatalf("Check = %v, want nil", err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Check = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// Key files of the wrong kind are refused: a private key where a public
// one is expected, and garbage.
func TestParseKeys(t *testing.T) {
	pubPEM, privPEM := keys(t)
	if _, err := ParsePublicKey(privPEM); !errors.Is(err, ErrKey) {
		t.Errorf("ParsePublicKey(private) = %v, want ErrKey", err)
	}
	if _, err := ParsePrivateKey(pubPEM); !errors.Is(err, ErrKey) {
		t.Errorf("ParsePrivateKey(public) = %v, want ErrKey", err)
	}
	if _, err := ParsePublicKey([]byte("not a key")); !errors.Is(err, ErrKey) {
		t.Errorf("ParsePublicKey(garbage) = %v, want ErrKey", err)
	}
}

// No update from an untrusted hub verifies without the release key's
// signature: whatever the frame's release, digest and signature text,
// Verify never panics and accepts only the real signature.
func FuzzVerify(f *testing.F) {
	pubPEM, privPEM, err := GenerateKey()
	if err != nil {
		f.Fatal(err)
	}
	pub, _ := ParsePublicKey(pubPEM)
	priv, _ := ParsePrivateKey(privPEM)
	f.Add("0.5.0", "ab", Sign(priv, "0.5.0", "ab"))
	f.Add("0.5.0", "ab", "")
	f.Add("", "", "====")
	f.Fuzz(func(t *testing.T, release, sum, sig string) {
		err := Verify(pub, release, sum, sig)
		if err == nil && strings.TrimSpace(sig) != Sign(priv, release, sum) {
			t.Fatalf("accepted a signature the key did not make: %q over %q %q", sig, release, sum)
		}
	})
}
