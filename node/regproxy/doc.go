// Package regproxy is the guest registry proxy (XFER-18..XFER-23): the
// [http.Handler] the node serves to a job's microVM as http://registry.vk
// on the job's switch network ([executor.microvm] net_mode = "switch",
// node/vmnet.go). The hub mints no job registry tokens yet (DECISIONS
// ruling 4), so today such a job gets a refusing proxy and caches use the
// node's own credential. docs/registry-proxy.md says what a host must do
// to serve it.
//
// # What passes
//
// A [Proxy] built by [New] with a job registry token forwards three path
// prefixes of the node's registry (its [registry] base URL) and nothing
// else (XFER-20):
//
//	/v2/         the OCI distribution API, every method but CONNECT and TRACE
//	/lock/       the registry's lock API, likewise
//	/dav/files/  plain files: GET HEAD PROPFIND PUT MKCOL DELETE OPTIONS only
//	             (XFER-21); MOVE and COPY, which would name the proxy in
//	             their Destination, and every other method answer 405
//
// Anything else answers 404; a path that is not canonical (dot segments,
// doubled slashes, control bytes, backslashes) answers 400, so what is
// checked is exactly what is forwarded. The forwarded path is the decoded,
// checked path re-encoded, never the guest's raw escaping (an encoded
// "%2F" cannot smuggle a different path past the prefix check). The query
// is forwarded as sent, less parameters net/url cannot parse.
//
// # Credentials (XFER-18, XFER-19)
//
// The proxy puts "Authorization: Bearer <job token>" on every forwarded
// request; the registry enforces the token's grants. It holds no other
// credential and never sends the node's: the guest's own Authorization,
// Proxy-Authorization, Cookie and forwarding headers are dropped, user
// info in the upstream URL is stripped, and redirects that leave the
// registry's origin are followed without any credential. The Transport
// given to [New] must not add credentials of its own.
//
// A job without a token, and every job a local gitlab-runner hands the
// node, gets a refusing proxy ([Refusing], or [New] with an empty token):
// every request answers 403 with the reason in the body. A token past its
// [Config.Expires] (by the injected clock) turns the proxy into a refusing
// one: 403 "job registry token expired". Expiry is checked when a request
// starts; a transfer already streaming is left to the registry.
//
// Refusals under /v2/ use the distribution error body
// ({"errors":[{"code":"DENIED",…}]}) so docker, oras and crane print the
// message; elsewhere the body is one line of text. Every body starts with
// "vk registry proxy: ".
//
// # Streaming, headers and redirects (choices where the spec is silent)
//
//   - Request and response bodies are streamed (net/http/httputil's
//     ReverseProxy); nothing is buffered whole.
//   - Hop-by-hop headers (Connection and the headers it names,
//     Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade) are
//     stripped both ways; protocol upgrades are never proxied. No
//     X-Forwarded-* or Forwarded headers are added or passed on, and the
//     WebDAV Destination header is always dropped, and so are request
//     trailers.
//   - A 401 and its WWW-Authenticate challenge pass back unchanged; the
//     guest cannot answer a challenge (its Authorization is replaced), so
//     a 401 or 403 from the registry means the token lacks the grant.
//   - Location, Content-Location and Link headers that name the
//     registry's origin are rewritten to http://registry.vk (never to
//     the guest's Host header), so blob-upload sessions (202 + Location) and
//     same-origin redirects keep the guest talking to the proxy.
//   - A redirect of a GET or HEAD to another origin (blob storage, a
//     presigned URL) is followed by the proxy itself, up to
//     [MaxRedirects] hops, with no credential and only content
//     negotiation headers (Accept, Range, If-*); https to http is refused
//     (502). The guest therefore never needs a route to the storage. A
//     cross-origin redirect of any other method is passed back unchanged:
//     its body cannot be replayed, and the guest holds no credential to
//     leak.
//   - The upstream must be the registry's root (scheme://host[:port]);
//     the distribution API lives at /v2/ on the root.
//
// # The steps' environment (XFER-22, XFER-23)
//
// [Env] gives the steps VK_REGISTRY=http://registry.vk and
// VK_REGISTRY_NAMESPACES, space-separated "<prefix>=<rights>" with r, w
// and l for read, write and lock. [Enabled] is true only for
// net.mode = "switch", the only network that serves registry.vk; under any
// other mode a job gets neither the proxy nor the variables.
package regproxy
