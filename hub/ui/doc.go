// Package ui is the hub's operator web UI (DESIGN "Later: Operator web
// UI", OPS-01, OPS-02, OPS-06, API-56): server-rendered HTML pages an
// operator opens in a browser, with no JavaScript and no external assets,
// so it works offline and in a locked-down browser.
//
// [New] returns an [http.Handler] serving, under [Config.BasePath]:
//
//	GET  <base>/                                   Fleet: nodes, with pools/ceiling/drain forms (OPS-01, OPS-02)
//	GET  <base>/nodes/<id>                         one node (the "node's hub page" of OPS-01)
//	POST <base>/nodes/<id>/pools                   pools=a,b          (OPS-01)
//	POST <base>/nodes/<id>/ceiling                 ceiling=N|none     (OPS-02)
//	POST <base>/nodes/<id>/drain                   drain=on|off       (NODE-05)
//	GET  <base>/queue                              waiting tickets and jobs with their wait reason
//	GET  <base>/jobs, <base>/jobs/<id>             recent jobs; one job with its output tail
//	GET  <base>/gitlab                             GitLab › Servers: servers pending approval (OPS-06, API-56)
//	POST <base>/gitlab/<instance>/approval         state=approved|rejected for a server
//	GET  <base>/gitlab/<instance>/projects/<id>    a project's approval page (API-56)
//	POST <base>/gitlab/<instance>/projects/<id>/approval
//	GET  <base>/policy                             the capacity policy, read-only (edit with the CLI, OPS-03)
//	GET  <base>/audit                              the audit log
//	GET  <base>/static/ui.css                      the one stylesheet
//
// Every state-changing request is a POST form carrying a CSRF token: an
// HMAC-SHA256, under [Config.CSRFKey], of the operator, a per-browser
// session cookie and the form (its action and subject). A POST without
// the cookie or with a wrong token is refused 403 before anything
// changes. A successful POST writes an audit entry through the store and
// answers 303 See Other to a page (POST/redirect/GET), so reloading never
// repeats an action.
//
// Who may use the UI is decided by an [Auth]: [LoopbackOnly] (requests
// from 127.0.0.1 or ::1 only; the demo's default) or [BasicAuth] (an HTTP
// Basic password compared in constant time with a configured token). See
// docs/ui.md for how the hub mounts the handler and how to run it in
// production (its own listener, ui_addr, behind TLS).
//
// Choices where the spec is silent, made as an operator would expect:
//   - Approving or rejecting in the UI does exactly what
//     `vk-hub projects approve|reject` does on the admin socket: the same
//     store record, the same audit action ("approval.approved",
//     "approval.rejected") and subject ("<instance>" for a server,
//     "<instance>/<project>" for a project), then
//     [admin.Backend.ApprovalChanged]. An operator may decide on a project
//     the hub has not seen yet (approve ahead).
//   - Node forms use the admin socket's audit actions too: "node.pools",
//     "node.ceiling", "node.drain", "node.undrain".
//   - A ceiling field left empty or set to "none" removes the ceiling
//     ([admin.NoCeiling]).
//   - Job output is shown as text: ANSI escape sequences and other control
//     characters are removed, invalid UTF-8 replaced, and only the tail
//     ([Config.OutputTail] bytes) is shown.
//   - Without [Config.CSRFKey] a random key is made at [New]: forms
//     rendered before a hub restart are then refused once (403) and work
//     after a reload.
package ui
