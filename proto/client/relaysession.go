package client

import (
	"time"

	"github.com/vk-ci/vk/proto/internal/enum"
)

// Relay session versions (RSESS-10); see the package doc for the history.
const (
	// RelayVersionLegacy (1) is upstream's first relay session: report and
	// heartbeat only. The hub keeps such a session but gives it no new work.
	RelayVersionLegacy = 1
	// RelayVersionAdmissions (2) adds request_concurrency and the
	// admission lists.
	RelayVersionAdmissions = 2
	// RelayVersionUpdates (3) adds hub→relay update frames.
	RelayVersionUpdates = 3
	// RelayVersionNext (4) says the hub takes a next reservation request
	// in an outcome's body (OutcomeRequest.Next). The session's frames are
	// those of version 3: the version tells the relay what the client API
	// of the hub it is talking to understands.
	RelayVersionNext = 4
	// RelayVersion is the newest relay session version implemented.
	RelayVersion = RelayVersionNext
)

// Relay session version ranges (RSESS-10, DECISIONS 3).
var (
	// RelayHubVersions is what the hub accepts: version 1 too, so an old
	// relay keeps its session and can finish the jobs it holds, while its
	// new work is refused 403 forbidden (RSESS-10, RSESS-11).
	RelayHubVersions = VersionRange{Min: RelayVersionLegacy, Max: RelayVersion}
	// RelayClientVersions is what vk-gitlab offers.
	RelayClientVersions = VersionRange{Min: RelayVersionAdmissions, Max: RelayVersion}
)

// Limits the hub enforces on a relay's report (RSESS-09, RELAY-03).
const (
	MaxRelayRunners       = 64
	MaxRequestConcurrency = 128
	MaxRelayConcurrent    = 128
)

// RelayHello is the relay's first frame (type "hello", no seq).
type RelayHello struct {
	// Versions is the range the relay speaks. Required.
	Versions VersionRange `json:"versions"`
	// Relay is the relay's enrolled ID; checked against the signing key.
	Relay string `json:"relay"`
	// Release is vk-gitlab's version, e.g. "0.4.1".
	Release string `json:"release,omitempty"`
}

// RelayWelcome is the hub's answer (type "welcome", no seq).
type RelayWelcome struct {
	// Version is the negotiated version.
	Version int `json:"version"`
	// Handle names the session in the hub's logs.
	Handle string `json:"handle"`
	// HeartbeatSecs is the periodic heartbeat interval, in seconds
	// (changes are sent within 250 ms besides, RSESS-06). Required (> 0).
	HeartbeatSecs int `json:"heartbeat_secs"`
}

// RelayErrorCode is why the hub ends a relay session. Unknown codes decode
// to RelayErrorOther.
type RelayErrorCode string

// Relay session error codes.
const (
	RelayErrorVersion      RelayErrorCode = "version"      // no common version (RSESS-12: log "upgrade the hub", redial about once a minute)
	RelayErrorUnauthorized RelayErrorCode = "unauthorized" // relay unknown or removed
	RelayErrorLimits       RelayErrorCode = "limits"       // more than 64 runners or request_concurrency above 128 (RSESS-09)
	RelayErrorProtocol     RelayErrorCode = "protocol"     // a frame broke the protocol
	RelayErrorReplaced     RelayErrorCode = "replaced"     // a newer session of the same relay took over
	RelayErrorShutdown     RelayErrorCode = "shutdown"     // the hub is stopping
	RelayErrorOther        RelayErrorCode = "other"        // not known to this version
)

var knownRelayErrors = []RelayErrorCode{RelayErrorVersion, RelayErrorUnauthorized, RelayErrorLimits,
	RelayErrorProtocol, RelayErrorReplaced, RelayErrorShutdown, RelayErrorOther}

// UnmarshalText maps unknown codes to RelayErrorOther.
func (c *RelayErrorCode) UnmarshalText(b []byte) error {
	*c = enum.Parse(string(b), RelayErrorOther, knownRelayErrors)
	return nil
}

// RelayError is sent before the hub closes a session (type "error", no seq).
type RelayError struct {
	// Code says why. Required.
	Code RelayErrorCode `json:"code"`
	// Message is for the relay's log, e.g. naming both version ranges.
	Message string `json:"message"`
	// Versions is the hub's range, with code version; nil otherwise.
	Versions *VersionRange `json:"versions,omitempty"`
}

// RelayKeepalive proves the link is up (type "keepalive", no seq).
type RelayKeepalive struct{}

// RelayReport is the relay's inventory (type "report", seq; RSESS-02,
// RSESS-03): sent after welcome and when the configuration changes.
type RelayReport struct {
	// Release is vk-gitlab's version.
	Release string `json:"release"`
	// Host is the relay's host name.
	Host string `json:"host"`
	// SystemID is the daemon's persisted system_id (GL-02).
	SystemID string `json:"system_id"`
	// Concurrent is the daemon's concurrent (at most 128).
	Concurrent int `json:"concurrent"`
	// GitLabURL is [gitlab] url.
	GitLabURL string `json:"gitlab_url"`
	// ServerKeySHA256 is the hex SHA-256 of the GitLab server
	// certificate's public key (SubjectPublicKeyInfo DER); empty for a
	// plain-HTTP GitLab.
	ServerKeySHA256 string `json:"server_key_sha256,omitempty"`
	// Runners are the configured runners (at most 64).
	Runners []RunnerReport `json:"runners"`
	// Allow is the relay's [hub] allow list: what the hub may ask of it
	// ("update", OPS-04). Empty from relays that predate it.
	Allow []string `json:"allow,omitempty"`
}

// RunnerReport is one runner in a RelayReport (RSESS-03).
type RunnerReport struct {
	// Name is the runner's name, unique in the relay. Required.
	Name string `json:"name"`
	// GitLabRunnerID is the ID /runners/verify returned; 0 before it
	// answered.
	GitLabRunnerID int64 `json:"gitlab_runner_id,omitempty"`
	// Placement is the runner's placement (PLACE-03).
	Placement Placement `json:"placement"`
	// Limit is the runner's job limit; 0 means no limit beyond concurrent.
	Limit int `json:"limit,omitempty"`
	// RequestConcurrency is its number of request loops (1..128).
	RequestConcurrency int `json:"request_concurrency"`
	// TokenAccepted: GitLab accepted the runner's token at the last verify.
	TokenAccepted bool `json:"token_accepted"`
}

// RunnerState is a runner's state in a heartbeat (RSESS-05). Unknown values
// decode to RunnerOther.
type RunnerState string

// Runner states.
const (
	RunnerPolling         RunnerState = "polling"          // asking GitLab for jobs
	RunnerWaitingCapacity RunnerState = "waiting_capacity" // waiting for a grant
	RunnerServerPending   RunnerState = "server_pending"   // the hub has not approved the GitLab server
	RunnerUnhealthy       RunnerState = "unhealthy"        // GitLab requests failing
	RunnerTokenRefused    RunnerState = "token_refused"    // GitLab refused the token (403); stopped
	RunnerOther           RunnerState = "other"            // not known to this version
)

var knownRunnerStates = []RunnerState{RunnerPolling, RunnerWaitingCapacity, RunnerServerPending,
	RunnerUnhealthy, RunnerTokenRefused, RunnerOther}

// UnmarshalText maps unknown states to RunnerOther.
func (s *RunnerState) UnmarshalText(b []byte) error {
	*s = enum.Parse(string(b), RunnerOther, knownRunnerStates)
	return nil
}

// RelayHeartbeat is the relay's periodic state (type "heartbeat", seq;
// RSESS-04, RSESS-06, ARB-39, ARB-40).
type RelayHeartbeat struct {
	// Runners has one entry per configured runner.
	Runners []RunnerHeartbeat `json:"runners"`
}

// RunnerHeartbeat is one runner's state in a heartbeat (RSESS-04).
type RunnerHeartbeat struct {
	// Name is the runner's name. Required.
	Name string `json:"name"`
	// State is the runner's state. Required.
	State RunnerState `json:"state"`
	// Tickets are the reservation tickets its loops hold, queued or
	// granted but not claimed (ARB-12).
	Tickets []string `json:"tickets,omitempty"`
	// RequestAdmissions are the admissions of its outstanding GitLab job
	// requests (claimed grants; ARB-26).
	RequestAdmissions []string `json:"request_admissions,omitempty"`
	// JobAdmissions are the jobs it holds, each with its admission if it
	// has one (ARB-35, ARB-11).
	JobAdmissions []JobAdmission `json:"job_admissions,omitempty"`
	// LastAnswer is GitLab's last answer to a job request; nil before the
	// first.
	LastAnswer *GitLabAnswer `json:"last_answer,omitempty"`
}

// JobAdmission is one job a runner holds.
type JobAdmission struct {
	// GitLabJob is GitLab's job ID.
	GitLabJob int64 `json:"gitlab_job"`
	// Job is the hub's job ID; empty before the submission was answered.
	Job string `json:"job,omitempty"`
	// Admission is the admission it was taken under; empty for none.
	Admission string `json:"admission,omitempty"`
}

// GitLabAnswer is GitLab's answer to a runner's job request.
type GitLabAnswer struct {
	// Status is the HTTP status (201, 204, 403, …); 0 for a transport
	// error.
	Status int `json:"status"`
	// At is when the answer arrived (the relay's clock, UTC).
	At time.Time `json:"at"`
	// Error describes a transport error or unexpected answer; empty
	// otherwise.
	Error string `json:"error,omitempty"`
}

// ApprovalStatus is the hub's status of the relay's GitLab server
// (RSESS-07). Unknown values decode to ApprovalOther, which a relay treats
// as not approved.
type ApprovalStatus string

// Approval statuses.
const (
	ApprovalApproved ApprovalStatus = "approved" // runners may ask GitLab for jobs
	ApprovalPending  ApprovalStatus = "pending"  // awaiting an operator
	ApprovalRejected ApprovalStatus = "rejected" // an operator rejected the server
	ApprovalRebound  ApprovalStatus = "rebound"  // the relay was told it is rebound elsewhere
	ApprovalRefused  ApprovalStatus = "refused"  // refused for good: never ask again (RSESS-07)
	ApprovalOther    ApprovalStatus = "other"    // not known to this version
)

var knownApprovals = []ApprovalStatus{ApprovalApproved, ApprovalPending, ApprovalRejected,
	ApprovalRebound, ApprovalRefused, ApprovalOther}

// UnmarshalText maps unknown statuses to ApprovalOther.
func (s *ApprovalStatus) UnmarshalText(b []byte) error {
	*s = enum.Parse(string(b), ApprovalOther, knownApprovals)
	return nil
}

// ServerStatus is the hub's answer about the relay's GitLab server (type
// "server_status", seq; RSESS-07): sent after the first report and on
// every change.
type ServerStatus struct {
	// Status is the server's approval status. Required.
	Status ApprovalStatus `json:"status"`
	// ApprovalURL is the page where an operator decides, when pending and
	// the hub serves a UI (API-56).
	ApprovalURL string `json:"approval_url,omitempty"`
	// Message explains a rejection or refusal for the relay's log.
	Message string `json:"message,omitempty"`
}

// Update asks the relay to update itself (type "update", seq; version ≥ 3,
// OPS-04), sent only to relays whose [hub] allow lists update.
type Update struct {
	// Release is the version to install, e.g. "0.5.0".
	Release string `json:"release"`
	// URL is where to download it from the hub: the RouteRelease path.
	// A relay fetches that path from the hub it is enrolled with, as a
	// signed request, whatever host the URL names.
	URL string `json:"url"`
	// SHA256 is the download's hex SHA-256.
	SHA256 string `json:"sha256"`
	// Size is the download's length in bytes; 0 when the hub did not say
	// (a relay then checks the SHA-256 and signature only).
	Size int64 `json:"size,omitempty"`
	// Signature is the release's ed25519 signature over
	// ReleaseSigningMessage(Release, SHA256), standard base64, made with
	// the release key off the hub. A relay refuses an update without one.
	Signature string `json:"signature,omitempty"`
}

// ReleaseSigningMessage is what a release signature signs: "vk-gitlab ",
// the release, a space and the hex SHA-256 of the binary (OPS-04).
func ReleaseSigningMessage(release, sha256Hex string) []byte {
	return []byte("vk-gitlab " + release + " " + sha256Hex)
}

// RelayAllowUpdate is the [hub] allow entry, and RelayReport.Allow value,
// that lets the hub update the relay (OPS-04).
const RelayAllowUpdate = "update"
