package client

// RouteJoin is the hub's enrolment endpoint (AUTH-08). It is not signed:
// the one-time token in the body authenticates it. Relays and nodes both
// enrol through it.
const RouteJoin = "POST /v1/join"

// Principal kinds a join token enrols, the values of [JoinRequest.Kind].
const (
	KindGitLab = "gitlab" // a relay, vk-gitlab
	KindNode   = "node"   // a node, vk node
)

// JoinRequest is the body of POST /v1/join (AUTH-08). The hub decodes it
// strictly.
type JoinRequest struct {
	// Token is the one-time enrolment token from `vk-hub token create`.
	// Required.
	Token string `json:"token"`
	// PublicKey is the principal's raw 32-byte ed25519 public key, standard
	// base64 with padding. Required; the hub pins it (AUTH-08).
	PublicKey string `json:"public_key"`
	// Name is a display name (host name), at most 253 bytes. Required.
	Name string `json:"name"`
	// Kind is KindGitLab or KindNode and must be the token's. Required.
	Kind string `json:"kind"`
}

// JoinResponse is the answer 201 to POST /v1/join.
type JoinResponse struct {
	// ID is the principal ID the hub assigned; the principal signs its
	// requests with it from now on.
	ID string `json:"id"`
	// CAPEM is the hub's CA certificate, PEM.
	CAPEM string `json:"ca_pem"`
}
