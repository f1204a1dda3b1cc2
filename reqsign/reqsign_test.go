package reqsign

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/deptest"
	"pgregory.net/rapid"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func fixedKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

// TestDeps: the relay, node and hub all import reqsign, so it must stay
// stdlib-only.
func TestDeps(t *testing.T) {
	deptest.StdlibOnly(t, "github.com/vk-ci/vk/reqsign")
}

// spec: AUTH-12, AUTH-13
func TestVerifyTable(t *testing.T) {
	key := fixedKey(1)
	pub := key.Public().(ed25519.PublicKey)
	other := fixedKey(2).Public().(ed25519.PublicKey)
	ekm := bytes.Repeat([]byte{7}, ExporterLen)
	body := []byte(`{"runner":"r1"}`)
	good := Sign(key, "relay-1", "POST", "/v1/jobs?x=1", body, t0, ekm)

	type in struct {
		pub       ed25519.PublicKey
		principal string
		method    string
		path      string
		body      []byte
		t         time.Time
		ekm       []byte
		sig       string
		now       time.Time
		skew      time.Duration
	}
	base := in{pub, "relay-1", "POST", "/v1/jobs?x=1", body, t0, ekm, good, t0, 0}
	tests := []struct {
		name string
		mod  func(*in)
		want error
	}{
		{"good", func(*in) {}, nil},
		{"good at +300s (default skew edge)", func(i *in) { i.now = t0.Add(300 * time.Second) }, nil},
		{"good at -300s", func(i *in) { i.now = t0.Add(-300 * time.Second) }, nil},
		{"late by 301s", func(i *in) { i.now = t0.Add(301 * time.Second) }, ErrSkew},
		{"early by 301s", func(i *in) { i.now = t0.Add(-301 * time.Second) }, ErrSkew},
		{"custom skew 10s", func(i *in) { i.now = t0.Add(11 * time.Second); i.skew = 10 * time.Second }, ErrSkew},
		{"sub-second time ignored", func(i *in) { i.t = t0.Add(900 * time.Millisecond) }, nil},
		{"other key", func(i *in) { i.pub = other }, ErrBadSignature},
		{"other principal", func(i *in) { i.principal = "relay-2" }, ErrBadSignature},
		{"other method", func(i *in) { i.method = "PUT" }, ErrBadSignature},
		{"other path", func(i *in) { i.path = "/v1/jobs" }, ErrBadSignature},
		{"other query", func(i *in) { i.path = "/v1/jobs?x=2" }, ErrBadSignature},
		{"other body", func(i *in) { i.body = []byte(`{"runner":"r2"}`) }, ErrBadSignature},
		{"other time within skew", func(i *in) { i.t = t0.Add(time.Second) }, ErrBadSignature},
		{"other exporter", func(i *in) { i.ekm = bytes.Repeat([]byte{8}, ExporterLen) }, ErrBadSignature},
		{"empty sig", func(i *in) { i.sig = "" }, ErrMissing},
		{"empty principal", func(i *in) { i.principal = "" }, ErrMissing},
		{"bad base64", func(i *in) { i.sig = "!!!" }, ErrMalformed},
		{"short sig", func(i *in) { i.sig = base64.StdEncoding.EncodeToString([]byte("short")) }, ErrMalformed},
		{"bad key", func(i *in) { i.pub = ed25519.PublicKey{1, 2} }, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := base
			tt.mod(&i)
			err := Verify(i.pub, i.principal, i.method, i.path, i.body, i.t, i.ekm, i.sig, i.now, i.skew)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

// spec: AUTH-12
// Distinct requests never share a client_request_message: the encoding is
// injective over its fields.
func TestMessageInjective(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		gen := func(label string) [6][]byte {
			return [6][]byte{
				[]byte(rapid.StringN(0, 6, -1).Draw(t, label+"p")),
				[]byte(rapid.SampledFrom([]string{"GET", "POST", "P"}).Draw(t, label+"m")),
				[]byte(rapid.StringN(0, 6, -1).Draw(t, label+"q")),
				rapid.SliceOfN(rapid.Byte(), 0, 4).Draw(t, label+"b"),
				[]byte(strconv.Itoa(rapid.IntRange(0, 3).Draw(t, label+"t"))),
				rapid.SliceOfN(rapid.Byte(), 0, 3).Draw(t, label+"e"),
			}
		}
		a, b := gen("a"), gen("b")
		ta, _ := strconv.Atoi(string(a[4]))
		tb, _ := strconv.Atoi(string(b[4]))
		ma := Message(string(a[0]), string(a[1]), string(a[2]), a[3], time.Unix(int64(ta), 0), a[5])
		mb := Message(string(b[0]), string(b[1]), string(b[2]), b[3], time.Unix(int64(tb), 0), b[5])
		same := true
		for i := range a {
			if !bytes.Equal(a[i], b[i]) {
				same = false
			}
		}
		if bytes.Equal(ma, mb) != same {
			t.Fatalf("fields equal=%v but messages equal=%v", same, bytes.Equal(ma, mb))
		}
	})
}

// spec: AUTH-11
func TestParseHeaders(t *testing.T) {
	tests := []struct {
		name               string
		principal, ts, sig string
		want               error
		wantTime           time.Time
	}{
		{"ok", "relay-1", "1796040000", "c2ln", nil, time.Unix(1796040000, 0).UTC()},
		{"missing principal", "", "1", "c2ln", ErrMissing, time.Time{}},
		{"missing time", "r", "", "c2ln", ErrMissing, time.Time{}},
		{"missing sig", "r", "1", "", ErrMissing, time.Time{}},
		{"rfc3339 time refused", "r", "2026-11-30T12:00:00Z", "c2ln", ErrMalformed, time.Time{}},
		{"negative time", "r", "-5", "c2ln", ErrMalformed, time.Time{}},
		{"huge time", "r", "99999999999999999999", "c2ln", ErrMalformed, time.Time{}},
		{"space in principal", "a b", "1", "c2ln", ErrMalformed, time.Time{}},
		{"long principal", string(bytes.Repeat([]byte{'a'}, 257)), "1", "c2ln", ErrMalformed, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.principal != "" {
				h.Set(HeaderPrincipal, tt.principal)
			}
			if tt.ts != "" {
				h.Set(HeaderTime, tt.ts)
			}
			if tt.sig != "" {
				h.Set(HeaderSignature, tt.sig)
			}
			got, err := ParseHeaders(h)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("ParseHeaders = %v, want %v", err, tt.want)
			}
			if err == nil && (!got.Time.Equal(tt.wantTime) || got.Principal != tt.principal || got.Signature != tt.sig) {
				t.Errorf("ParseHeaders = %+v", got)
			}
		})
	}
}

// spec: AUTH-11
func TestSetHeadersRoundTrip(t *testing.T) {
	h := http.Header{}
	SetHeaders(h, "node-9", t0.Add(500*time.Millisecond), "c2ln")
	got, err := ParseHeaders(h)
	if err != nil {
		t.Fatal(err)
	}
	if got.Principal != "node-9" || !got.Time.Equal(t0) || got.Signature != "c2ln" {
		t.Errorf("round trip = %+v", got)
	}
	if h.Get("vk-time") != strconv.FormatInt(t0.Unix(), 10) {
		t.Errorf("vk-time = %q, want Unix seconds", h.Get("vk-time"))
	}
}

// FuzzVerify feeds arbitrary header values and request fields to the
// header parser and verifier. It must never panic, and whatever it accepts
// must be exactly the signature the key would make over those fields.
//
// spec: AUTH-13
func FuzzVerify(f *testing.F) {
	key := fixedKey(3)
	pub := key.Public().(ed25519.PublicKey)
	ekm := bytes.Repeat([]byte{9}, ExporterLen)
	good := Sign(key, "relay-1", "GET", "/v1/x", nil, t0, ekm)
	f.Add("relay-1", strconv.FormatInt(t0.Unix(), 10), good, "GET", "/v1/x", []byte(nil))
	f.Add("relay-1", strconv.FormatInt(t0.Unix(), 10), good, "GET", "/v1/y", []byte(nil))
	f.Add("", "", "", "", "", []byte("x"))
	f.Add("r", "1", "====", "POST", "/", []byte("{}"))
	f.Add("r\x00", "0001", good+"\n", "POST", "/?a=b", []byte("{}"))
	f.Fuzz(func(t *testing.T, principal, ts, sig, method, path string, body []byte) {
		h := http.Header{}
		h[HeaderPrincipal] = []string{principal}
		h[HeaderTime] = []string{ts}
		h[HeaderSignature] = []string{sig}
		hd, err := ParseHeaders(h)
		if err != nil {
			if !errors.Is(err, ErrMissing) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseHeaders error %v is no sentinel", err)
			}
			return
		}
		err = Verify(pub, hd.Principal, method, path, body, hd.Time, ekm, hd.Signature, t0, 0)
		if err == nil {
			raw, _ := base64.StdEncoding.DecodeString(hd.Signature)
			want := ed25519.Sign(key, Message(hd.Principal, method, path, body, hd.Time, ekm))
			if !bytes.Equal(raw, want) {
				t.Fatalf("accepted a signature that is not the key's")
			}
			return
		}
		for _, s := range []error{ErrMissing, ErrMalformed, ErrSkew, ErrBadSignature} {
			if errors.Is(err, s) {
				return
			}
		}
		t.Fatalf("Verify error %v is no sentinel", err)
	})
}
