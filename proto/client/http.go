package client

// Routes of the client API (API-01..09), as http.ServeMux patterns. Path
// wildcards: {id} a reservation or job ID, {ticket} a ticket, {admission}
// an admission.
const (
	RouteCapacity          = "POST /v1/capacity"
	RouteReserve           = "POST /v1/reservations"
	RouteTicketGet         = "GET /v1/reservations/tickets/{ticket}"
	RouteTicketDelete      = "DELETE /v1/reservations/tickets/{ticket}"
	RouteClaim             = "POST /v1/reservations/{id}/claim"
	RouteOutcome           = "POST /v1/reservations/{admission}/outcome"
	RouteRenew             = "POST /v1/reservations/{id}/renew"
	RouteReservationDelete = "DELETE /v1/reservations/{id}"
	RouteSubmit            = "POST /v1/jobs"
	RouteJobGet            = "GET /v1/jobs/{id}"
	RouteOutput            = "GET /v1/jobs/{id}/output"
	RouteCancel            = "POST /v1/jobs/{id}/cancel"
	RouteSettle            = "POST /v1/jobs/{id}/settle"
	RouteClients           = "POST /v1/clients"
	RouteRelaySession      = "GET /v1/gitlab/session"
	// RouteRelease streams a published vk-gitlab release to a relay
	// (OPS-04): signed, relays only; 200 with the bytes.
	RouteRelease = "GET /v1/releases/{version}/vk-gitlab"
)

// HTTP headers of the client API.
const (
	// HeaderRelay carries the relay's ID on every signed request (AUTH-11).
	HeaderRelay = "vk-relay"
	// HeaderTime carries the signing time (AUTH-11).
	HeaderTime = "vk-time"
	// HeaderSignature carries the ed25519 signature (AUTH-11, AUTH-12).
	HeaderSignature = "vk-signature"
	// HeaderOutputOffset is the offset of an output answer's first byte
	// (API-37).
	HeaderOutputOffset = "vk-output-offset"
	// HeaderOutputLength is the job's output length so far (API-37, API-38).
	HeaderOutputLength = "vk-output-length"
	// HeaderOutputComplete is "true" only once the job ended and the body
	// reaches the end of its output (API-37).
	HeaderOutputComplete = "vk-output-complete"
)

// Numbers of the client API that both sides must agree on.
const (
	// MaxWaitSecs caps every long poll, in seconds (API-10).
	MaxWaitSecs = 60
	// MinQueuelessWaitSecs is the least a queue=false reservation request
	// waits, in seconds (API-18).
	MinQueuelessWaitSecs = 5
	// MaxOutputRead is the most one output read returns, in bytes (API-37).
	MaxOutputRead = 1 << 20
	// DefaultLeaseSecs is a reservation's lease when none is asked (ARB-28).
	DefaultLeaseSecs = 90
	// RelayPlaceWithinSecs is the place_within_secs vk-gitlab sends with
	// every job submission, in seconds (ARB-38). It is no operator
	// setting; only tests send another (relay.Options.PlaceWithinSecs).
	RelayPlaceWithinSecs = 300
	// TicketIdleSecs is how long an unpolled, unclaimed ticket lives (ARB-03).
	TicketIdleSecs = 120
	// MaxUnendedPerPrincipal bounds a principal's unended reservations
	// (API-20).
	MaxUnendedPerPrincipal = 256
	// MaxUnendedPerHub bounds the hub's unended reservations (API-20).
	MaxUnendedPerHub = 4096
	// RequestIDTTLSecs is how long a request_id makes a create idempotent,
	// in seconds (API-42): 24 hours.
	RequestIDTTLSecs = 24 * 60 * 60
)
