// Package admin is the operator's surface of vk-hub: an HTTP handler set
// the hub serves on a local unix socket, <state_dir>/admin.sock, and the
// `vk-hub` subcommands that talk to it ([Commands]): `token create`,
// `relays list|remove`, `nodes list|pools|ceiling|drain`,
// `capacity-policy get|set`, `projects list|approve|reject`.
//
// # Who may use it
//
// The socket is created mode 0600 inside the hub's state directory (itself
// 0700), so only root and the hub's own user can connect; on Linux the hub
// also checks each connection's peer with SO_PEERCRED and answers 403 to
// any other user (Config.AllowUIDs adds more). The caller's user name is
// recorded as the actor ("operator:<user>") in the audit log and on
// approvals. There is no network listener and no token for it: being able
// to open the socket is the authority. The CLI never opens the database;
// when nothing answers on the socket it says "is vk-hub running? looked
// for <path>".
//
// # What lives where
//
// Tokens (via hub/enrol), relays and project approvals are stored records
// and handled here against hub/store; the hub's live state (nodes, pools,
// ceilings, drain, the capacity policy) belongs to its driver and is
// reached through [Backend], which the hub implements; Backend is also told
// when a relay is removed or an approval changes. Every change appends an
// audit entry.
//
// # Socket protocol
//
// HTTP/1.1 over the socket, JSON bodies decoded strictly, errors as the
// client API's {error, code} body (400 invalid, 404 not_found, 500
// internal); the capacity policy travels as its TOML file
// (docs/capacity-policy.md), validated by the CLI before sending and again
// by the hub. Routes:
//
//	POST   /admin/tokens              {kind, ttl_secs} → 201 {token, kind, expires, ca_fingerprint}
//	GET    /admin/relays              → 200 [relay]
//	DELETE /admin/relays/{id}         → 204 (idempotent)
//	GET    /admin/nodes               → 200 [node] sorted by ID
//	PUT    /admin/nodes/{id}/pools    {pools} → 204            (OPS-01)
//	PUT    /admin/nodes/{id}/ceiling  {ceiling: n|-1} → 204    (OPS-02)
//	PUT    /admin/nodes/{id}/drain    {drain: bool} → 204
//	GET    /admin/policy              → 200 policy file        (OPS-03)
//	PUT    /admin/policy              policy file → 204        (OPS-03)
//	GET    /admin/projects            → 200 [approval]
//	POST   /admin/projects            {instance, project, state} → 204 (OPS-06)
//
// Choices where the spec is silent: `nodes ceiling <id> none` removes the
// hub's ceiling (the node's own max_concurrency alone caps it); `nodes
// drain <id> --undo` ends a drain; `projects approve <instance> server`
// approves the GitLab server itself (approval record with project 0); a
// project may be approved before the hub has seen it; `token create`
// prints the token alone on stdout (so it pipes into `join --token -`)
// and its expiry and the hub CA's fingerprint on stderr.
package admin
