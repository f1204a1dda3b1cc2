package client

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// RequestIDLen is the length of a request ID's text form: 16 random bytes,
// hex encoded (API-42).
const RequestIDLen = 32

// NewRequestID returns a fresh request ID: 16 bytes from crypto/rand,
// lower-case hex. A create retried with the same ID is idempotent for 24
// hours (API-42, API-43).
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// ValidateRequestID checks that s is 32 lower-case hex digits, the only
// form the hub accepts, so the same ID always compares byte-equal. Errors
// wrap ErrInvalid.
func ValidateRequestID(s string) error {
	if len(s) != RequestIDLen {
		return fmt.Errorf("%w: request_id: want %d hex digits, got %d characters", ErrInvalid, RequestIDLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("%w: request_id: %q is not lower-case hex", ErrInvalid, s)
		}
	}
	return nil
}
