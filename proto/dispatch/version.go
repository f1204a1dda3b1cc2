package dispatch

import "github.com/vk-ci/vk/proto/client"

// Range is an inclusive range of node-session versions.
type Range = client.VersionRange

// Node-session protocol versions; see the package doc for the history.
const (
	// VersionJobs (3) adds the "job" message type (NSESS-01).
	VersionJobs = 3
	// VersionEgress (6) adds node→hub egress frames (NSESS-17).
	VersionEgress = 6
	// Version is the newest version this package implements.
	Version = VersionEgress
)

// The ranges each side speaks.
var (
	// HubVersions is what the hub accepts.
	HubVersions = Range{Min: VersionJobs, Max: Version}
	// NodeVersions is what vk node offers.
	NodeVersions = Range{Min: VersionJobs, Max: Version}
)

// ErrVersion is returned (wrapped in a *client.VersionError naming both
// ranges) when the peers share no version.
var ErrVersion = client.ErrVersion

// Negotiate returns the highest version in both local and remote, or an
// error naming both ranges for which errors.Is(err, ErrVersion) holds
// (DECISIONS 3).
func Negotiate(local, remote Range) (int, error) {
	return client.NegotiateVersion("node", local, remote)
}

// MinVersion returns the oldest session version in which m may be sent: 3
// for job messages, 6 for egress, 1 for the rest.
func MinVersion(m Message) int {
	switch {
	case m.FrameKind() == KindEgress:
		return VersionEgress
	case m.FrameType() == TypeJob:
		return VersionJobs
	}
	return 1
}
