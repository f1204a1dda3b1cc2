package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is an amount of memory or disk in bytes. The zero value is 0 bytes,
// which in an envelope means "none asked".
//
// Text form (config, JSON, logs): digits, optionally followed by a binary
// unit K, M, G, T, P or E (case-insensitive, optionally with a trailing "i"
// and/or "B": "16G", "16Gi", "16GiB", "16gb" all mean 16·2³⁰ bytes), or
// plain digits for bytes ("1024"; a lone "B" suffix is accepted too). No
// sign, fraction or space. The canonical printed form uses the largest unit
// that divides the value exactly and no suffix letters beyond it: 16 GiB
// prints "16G", 1.5 GiB prints "1536M", 1000 bytes prints "1000".
//
// In TOML config files (go-toml/v2, internal/conffile) a size is a string
// in that form (UnmarshalText) or an integer counting bytes, which the
// decoder stores directly: a negative integer is not refused there but by
// the config's validation (e.g. [Envelope.Validate]).
type Size int64

// Units for Size.
const (
	Byte Size = 1
	KiB       = 1024 * Byte
	MiB       = 1024 * KiB
	GiB       = 1024 * MiB
	TiB       = 1024 * GiB
	PiB       = 1024 * TiB
	EiB       = 1024 * PiB
)

// ErrSize: a size string is malformed, negative or overflows int64.
var ErrSize = errors.New("client: invalid size")

var sizeUnits = []struct {
	suffix byte
	unit   Size
}{{'E', EiB}, {'P', PiB}, {'T', TiB}, {'G', GiB}, {'M', MiB}, {'K', KiB}}

// ParseSize parses s in the text form described on [Size]. Errors wrap
// ErrSize.
func ParseSize(s string) (Size, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%w: %q", ErrSize, s)
	}
	digits, suffix := s[:i], strings.ToUpper(s[i:])
	unit := Byte
	if suffix != "" && suffix != "B" {
		found := false
		for _, u := range sizeUnits {
			if suffix[0] == u.suffix {
				unit, found = u.unit, true
				break
			}
		}
		switch rest := suffix[1:]; {
		case !found:
			return 0, fmt.Errorf("%w: %q: unknown unit", ErrSize, s)
		case rest != "" && rest != "I" && rest != "B" && rest != "IB":
			return 0, fmt.Errorf("%w: %q: unknown unit", ErrSize, s)
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > math.MaxInt64/int64(unit) {
		return 0, fmt.Errorf("%w: %q overflows", ErrSize, s)
	}
	return Size(n) * unit, nil
}

// String returns the canonical text form ("16G", "1536M", "1000"). A
// negative size (invalid) prints as its plain number.
func (s Size) String() string {
	if s > 0 {
		for _, u := range sizeUnits {
			if s%u.unit == 0 {
				return strconv.FormatInt(int64(s/u.unit), 10) + string(u.suffix)
			}
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// Bytes returns s as a byte count.
func (s Size) Bytes() int64 { return int64(s) }

// MiB returns s in whole MiB, rounded up.
func (s Size) MiB() int64 { return int64((s + MiB - 1) / MiB) }

// MarshalText writes the canonical form; it fails for a negative size.
func (s Size) MarshalText() ([]byte, error) {
	if s < 0 {
		return nil, fmt.Errorf("%w: negative %d", ErrSize, int64(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText parses the text form (for TOML and other text codecs).
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalJSON writes the canonical form as a JSON string, e.g. "16G".
func (s Size) MarshalJSON() ([]byte, error) {
	t, err := s.MarshalText()
	if err != nil {
		return nil, err
	}
	return json.Marshal(string(t))
}

// UnmarshalJSON accepts a string in the text form or a non-negative JSON
// integer counting bytes.
func (s *Size) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return fmt.Errorf("%w: %v", ErrSize, err)
		}
		return s.UnmarshalText([]byte(str))
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil || n < 0 {
		return fmt.Errorf("%w: %s", ErrSize, b)
	}
	*s = Size(n)
	return nil
}
