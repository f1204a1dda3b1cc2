// Package hubclient is the client side of the hub's client API (API-01..56)
// and of enrolment (AUTH-08..10): what vk-gitlab, `vk node join` and other
// programs use to talk to vk-hub.
//
// # Requests
//
// [New] returns a [Client] with one typed method per endpoint, each taking
// a context and returning (typed answer, error), the status → answer table
// of each endpoint living in that method (STYLE C11). Requests travel over
// TLS 1.3 connections the client keeps ([reqsign.Pool]): each request is
// signed afresh over the exporter of the connection it is written on, with
// that connection's next sequence number (AUTH-11..14, docs/security.md),
// and a connection carries many requests one after another. A connection
// that breaks is dropped. A request that found its kept connection closed
// before any answer is sent again at once on a new connection when nothing
// of it can have been acted on (its write failed, or it is a GET);
// otherwise it comes back as a transport error for the retry rules below
// (and every retry is a new signature, on whatever connection it travels). Connections open are the
// caller's requests in flight plus at most Config.MaxIdleConns (16) idle
// ones, each closed after 30 s idle. A TLS-terminating proxy in front of
// the hub cannot work (AUTH-14). The hub's CA is pinned: the system roots
// are never consulted.
//
// Error answers decode into [*client.StatusError] (use errors.As): the
// body {error, code, retry_after_secs?, approval_url?} is read leniently,
// an unknown code reads as [client.CodeOther] and unknown fields are
// ignored (API-55); a missing or non-JSON body gives code other with the
// HTTP status text. When the body gives no retry_after_secs but the answer
// has a Retry-After header in seconds, its value is put in
// Body.RetryAfterSecs. An answer whose status is not one the endpoint
// defines for success, or whose success body does not decode, is an error
// wrapping [ErrProtocol]; transport failures come back as they are
// (wrapped), never as a StatusError. Each request is bounded by
// Config.Timeout (30 s) plus its long-poll wait; running out of that
// while the caller's context is live is [ErrTimeout], a transport error.
//
// # Retries
//
// [Retrier] implements the relay's retry rules with an injected clock and
// random source, so tests need no sleeps:
//
//   - [Retrier.Do] (RELAY-13): transport errors and retryable codes
//     (internal, no_capacity, unavailable, and any 5xx whose code is
//     unknown) are retried with exponential backoff from 1 s to 30 s plus
//     jitter; a retry_after_secs (or Retry-After) is honoured as the least
//     wait; every other 4xx, and [ErrProtocol], ends the loop.
//   - [Retrier.DoUntilAccepted] (RELAY-14, RELAY-16): for job cancels and
//     settles — every failure is retried with the same backoff (401 and 409
//     included, so a settle answered 409 repeats until the job ends) until
//     the request is accepted or answered 400 or 404.
//
// Both stop when their context ends, returning the last error joined with
// the context's. Choices the spec leaves open (documented here, DECISIONS
// 10): the jitter is uniform in [0, d/2) on top of the backoff d; a
// retry_after_secs larger than the backoff replaces it (jitter of up to
// 10 % added so a fleet told the same number does not come back in one
// instant) and is capped at 10 minutes against a bogus value.
//
// # Enrolment
//
// [Join] calls the hub's unsigned `POST /v1/join` (authenticated by a
// one-time token, served by hub/enrol) with a new ed25519 key and returns
// the principal ID and the hub's CA. [SaveEnrolment], [LoadEnrolment] and
// [Leave] keep the result under <state_dir>/hub/ (AUTH-09) and refuse to
// change it while the caller's busy check reports a recorded job
// (AUTH-10). These live here rather than in hub/enrol because the relay
// and the node must not import the hub's packages (STYLE, import DAG);
// hub/enrol imports this package for the join wire types.
package hubclient
