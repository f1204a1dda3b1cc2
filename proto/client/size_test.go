package client

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"pgregory.net/rapid"
)

// TestParseSize covers the accepted spellings and the rejections.
//
// spec: PROTO-08
func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Size
	}{
		{"0", 0},
		{"1024", 1024},
		{"1000B", 1000},
		{"16G", 16 * GiB},
		{"16g", 16 * GiB},
		{"16Gi", 16 * GiB},
		{"16GiB", 16 * GiB},
		{"16gb", 16 * GiB},
		{"512M", 512 * MiB},
		{"1T", TiB},
		{"64K", 64 * KiB},
		{"2P", 2 * PiB},
		{"7E", 7 * EiB},
		{"1536M", 1536 * MiB},
		{"9223372036854775807", math.MaxInt64},
	} {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v, want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "G", "-1", "+1", "1.5G", "16 G", "16X", "16GG", "16Bi", "16i", "16iB", " 16G", "8E", "9223372036854775808", "99999999999999999999K"} {
		if got, err := ParseSize(in); !errors.Is(err, ErrSize) {
			t.Errorf("ParseSize(%q) = %d, %v, want ErrSize", in, got, err)
		}
	}
}

// TestSizeString pins the canonical printed form.
//
// spec: PROTO-08
func TestSizeString(t *testing.T) {
	for _, tc := range []struct {
		in   Size
		want string
	}{
		{0, "0"},
		{1, "1"},
		{1000, "1000"},
		{1024, "1K"},
		{1536 * MiB, "1536M"},
		{16 * GiB, "16G"},
		{TiB, "1T"},
		{1025, "1025"},
		{3 * EiB, "3E"},
		{-5, "-5"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("Size(%d).String() = %q, want %q", int64(tc.in), got, tc.want)
		}
	}
}

// TestSizeJSON: strings both ways, integers (bytes) accepted on decode,
// negatives refused.
//
// spec: PROTO-08
func TestSizeJSON(t *testing.T) {
	b, err := json.Marshal(Envelope{Mem: 16 * GiB, CPUs: 8, Disk: 512 * MiB})
	if err != nil || string(b) != `{"mem":"16G","cpus":8,"disk":"512M"}` {
		t.Errorf("Marshal = %s, %v", b, err)
	}
	var e Envelope
	if err := json.Unmarshal([]byte(`{"mem":17179869184,"cpus":8,"disk":"1T"}`), &e); err != nil || e.Mem != 16*GiB || e.Disk != TiB {
		t.Errorf("Unmarshal = %+v, %v", e, err)
	}
	for _, in := range []string{`{"mem":-1}`, `{"mem":"-1"}`, `{"mem":1.5}`, `{"mem":"lots"}`, `{"mem":true}`} {
		if err := json.Unmarshal([]byte(in), &e); !errors.Is(err, ErrSize) {
			t.Errorf("Unmarshal(%s) = %v, want ErrSize", in, err)
		}
	}
	if _, err := json.Marshal(Size(-1)); err == nil {
		t.Error("Marshal(Size(-1)) succeeded")
	}
	if (16*GiB).MiB() != 16384 || Size(1).MiB() != 1 || Size(0).MiB() != 0 {
		t.Error("MiB rounding wrong")
	}
}

// TestSizeRoundTrip: every non-negative size prints to a string that
// parses back to it, in text and in JSON.
//
// spec: PROTO-08
func TestSizeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		unit := rapid.SampledFrom([]Size{1, KiB, MiB, GiB, TiB, PiB}).Draw(t, "unit")
		s := Size(rapid.Int64Range(0, math.MaxInt64/int64(unit)).Draw(t, "n")) * unit
		got, err := ParseSize(s.String())
		if err != nil || got != s {
			t.Fatalf("ParseSize(%q) = %d, %v, want %d", s.String(), got, err, s)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Size
		if err := json.Unmarshal(b, &back); err != nil || back != s {
			t.Fatalf("JSON %s → %d, %v", b, back, err)
		}
	})
}

// FuzzParseSize: sizes come from config files and peers. Parsing never
// panics, and anything accepted prints canonically and parses back.
//
// spec: PROTO-08
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"16G", "512M", "1T", "1024", "16GiB", "1.5G", "", "9223372036854775807", "8E"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseSize(in)
		if err != nil {
			return
		}
		if s < 0 {
			t.Fatalf("ParseSize(%q) = %d < 0", in, s)
		}
		back, err := ParseSize(s.String())
		if err != nil || back != s {
			t.Fatalf("canonical %q of %q parses to %d, %v", s.String(), in, back, err)
		}
		var j Size
		if err := json.Unmarshal([]byte(`"`+s.String()+`"`), &j); err != nil || j != s {
			t.Fatalf("JSON of %q: %d, %v", in, j, err)
		}
	})
}
