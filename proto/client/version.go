package client

import (
	"errors"
	"fmt"
)

// VersionRange is an inclusive range of protocol versions a peer speaks.
// Both bounds are ≥ 1 and Min ≤ Max in a valid range.
type VersionRange struct {
	// Min is the oldest version spoken.
	Min int `json:"min"`
	// Max is the newest version spoken.
	Max int `json:"max"`
}

// String formats r as "2..3".
func (r VersionRange) String() string { return fmt.Sprintf("%d..%d", r.Min, r.Max) }

// Contains reports whether v is in r.
func (r VersionRange) Contains(v int) bool { return r.Min <= v && v <= r.Max }

// Valid reports 1 ≤ Min ≤ Max.
func (r VersionRange) Valid() bool { return 1 <= r.Min && r.Min <= r.Max }

// ErrVersion: two peers share no protocol version, or one sent an invalid
// range. The error text names both ranges.
var ErrVersion = errors.New("protocol version mismatch")

// VersionError is the error NegotiateVersion returns; errors.Is(err,
// ErrVersion) holds for it.
type VersionError struct {
	// Session names the session kind ("relay", "node") for the message.
	Session string
	// Local and Remote are the two ranges compared.
	Local, Remote VersionRange
}

// Error names the session kind and both ranges, and says which side is
// too old when one is.
func (e *VersionError) Error() string {
	hint := ""
	switch {
	case !e.Remote.Valid():
		hint = ": peer sent an invalid range"
	case e.Remote.Max < e.Local.Min:
		hint = ": the peer is too old and must be upgraded"
	case e.Remote.Min > e.Local.Max:
		hint = ": this side is too old and must be upgraded"
	}
	return fmt.Sprintf("%s session: %v: we speak %v, peer speaks %v%s", e.Session, ErrVersion, e.Local, e.Remote, hint)
}

// Is makes errors.Is(err, ErrVersion) true.
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// NegotiateVersion returns the highest version in both ranges, or a
// *VersionError naming both (DECISIONS 3). session labels the error.
func NegotiateVersion(session string, local, remote VersionRange) (int, error) {
	v := min(local.Max, remote.Max)
	if !local.Valid() || !remote.Valid() || v < max(local.Min, remote.Min) {
		return 0, &VersionError{Session: session, Local: local, Remote: remote}
	}
	return v, nil
}
