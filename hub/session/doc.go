// Package session is the hub's side of the long-lived WebSocket sessions:
// nodes at /v1/node/session (NSESS-*) and relays at /v1/gitlab/session
// (RSESS-*). It is independent of the scheduler: the hub driver implements
// [NodeHandler] and [RelayHandler] and sends through [NodeSession.Send] and
// [RelaySession.Send], which never block.
//
// # Handshake
//
// The upgrade is a signed GET authenticated with the principal's key over
// that TLS connection (AUTH-06, AUTH-14; internal/wsconn); failure answers
// 401 {"error":"unauthorized","code":"unauthorized"} and nothing is
// upgraded. The first frame must be the peer's hello naming the same
// principal. Versions are negotiated from ranges (DECISIONS 3): the hub
// speaks [dispatch.HubVersions] (3..6) to nodes, so a node offering at most
// 2 is refused (NSESS-03), and 1..4 to relays (RSESS-10), a version-1
// relay being accepted but refused new work ([RelaySession.NewWorkAllowed],
// RSESS-11). A refusal sends an error frame of code "version" whose
// message names both ranges and whose versions field is the hub's range,
// then closes with 1008. The welcome states the session handle, the
// negotiated version and the heartbeat period (and, to nodes, the
// unreachable threshold = period × missed heartbeats), the period growing
// with the fleet so the hub ingests at most MaxHeartbeatsPerSec (STYLE
// C6).
//
// # Streams
//
// Each direction numbers state-changing frames from 1 (proto/dispatch
// package doc). Per-session bookkeeping lives in [State], apart from the
// socket pump, and the outbound queue in a wsconn.Outbox: Send assigns the
// seq and queues; a writer goroutine per connection drains the queue; the
// connection's reader (the HTTP handler's goroutine) decodes, checks and
// delivers. An incoming seq that skips ahead, a message the negotiated
// version lacks (a job message below 3, NSESS-02), a hub-to-node message
// sent by a node, an undecodable frame, or one over 1 MiB (NSESS-23) ends
// the session with an error frame and close code; a relay report listing
// more than 64 runners or request_concurrency above 128 ends it with code
// "limits" (RSESS-09).
//
// # Resume (node sessions)
//
// When a node's connection drops, its session stays in the registry,
// detached, for [Config.ResumeWindow]. A hello naming its handle and the
// last hub seq the node processed resumes it: the welcome says resumed
// and names the last node seq the hub processed; each side then writes
// again what the other has not processed (the outbound queue keeps the
// last QueueFrames frames), so every frame reaches the handler exactly
// once per session, in order. Frames sent while detached queue. When the
// handle is unknown or too old, or the frames were evicted, the node gets
// a new session and must send report then held (NSESS-11, NSESS-24).
// Relay sessions are not resumed: each connection is a new session.
//
// # Registry
//
// One session per principal: a new session of the same node or relay
// replaces the old one, which is told "replaced" and closed (1000). The
// driver sees NodeDown/RelayDown for the old one before NodeUp/RelayUp
// for the new one.
//
// # One server, two kinds
//
// NodeServer and RelayServer are one generic server (server.go: the
// registry, the accept → handshake → read shape, the replace step, the
// reader and the ending) over what differs per kind, kept in node.go and
// relay.go: the frames and their decoders, which frames a peer may send,
// version negotiation, the error and close codes that end a session
// (relays have "limits"), the welcome, the handler calls, and resume,
// which only node sessions have.
package session
