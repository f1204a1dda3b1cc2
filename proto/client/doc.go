// Package client defines the bodies of the hub's client API (PROTO-01..11,
// API-*) and the messages of the relay session (RSESS-*).
//
// # Client API
//
// HTTP/1.1 + JSON over TLS 1.3 under /v1/ (API-01). Each request body type
// names its route in its doc comment. The hub decodes request bodies
// strictly (unknown fields are an error, C10); clients decode answers
// leniently (unknown fields ignored, API-55). Unknown enum strings in an
// answer (error codes, job states, failures, …) decode to the enum's Other
// value instead of failing (C5), so an older client keeps working against a
// newer hub; re-encoding such a value writes "other".
//
// Errors travel as [Error] bodies with a [Code]; [Code.Retryable] says
// whether a client may retry (API-46..54).
//
// # Sizes
//
// Memory and disk are [Size] values: binary units, parsed from "16G",
// "512M", "1T", "64K" or plain bytes, printed in the largest unit that
// divides them exactly. On the wire a Size is that canonical string
// ("16G"); an integer (bytes) is accepted on decode too.
//
// # Relay session
//
// vk-gitlab holds a WebSocket session at /v1/gitlab/session (RSESS-01). Its
// frames are JSON objects {"type": …, "seq": …, …fields} like the node
// session's (see package dispatch); [EncodeRelayFrame] and
// [DecodeRelayFrame] read and write them. Versions (RSESS-10) are in their
// own space, independent of the node session's (DECISIONS 3):
//
//   - 1: report and heartbeat (upstream). The hub keeps a version-1 session
//     so an old relay can finish, follow, cancel and settle the jobs it
//     holds, but answers its new work 403 forbidden (RSESS-11);
//   - 2 (2026-11-30): request_concurrency in the report, request_admissions
//     and job_admissions in heartbeats;
//   - 3 (2026-11-30): hub→relay update frames; their size and signature
//     and the report's allow were added later as optional fields (OPS-04);
//   - 4 (2026-12-03): no new frames; the hub takes OutcomeRequest.Next, so
//     a relay asks for its next reservation in the outcome of the last.
//
// The hub speaks [RelayHubVersions] (1..4) and vk-gitlab
// [RelayClientVersions] (2..4); [NegotiateVersion] picks the highest common
// version or names both ranges in its error.
//
// This package imports the standard library and proto/job only.
package client
