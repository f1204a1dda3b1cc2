package client

// CapacityRequest is the body of POST /v1/capacity (PROTO-02, API-02): how
// many envelopes of a placement the fleet could take now. Sent by API-key
// clients; vk-gitlab never calls it (API-15).
type CapacityRequest struct {
	// Runner names the asking runner; empty for API-key clients.
	Runner string `json:"runner,omitempty"`
	// Placement is the shape asked about. Required.
	Placement Placement `json:"placement"`
	// After is a Capacity.Revision already seen: the hub holds the request
	// until its count's revision passes it (long poll, API-11). 0 answers
	// at once.
	After uint64 `json:"after,omitempty"`
	// WaitSecs bounds the long poll, in seconds; capped at 60 (API-10). 0
	// answers at once.
	WaitSecs int `json:"wait_secs,omitempty"`
}

// Capacity is the answer to POST /v1/capacity (PROTO-02, API-13, API-14).
type Capacity struct {
	// Revision increases whenever Fits may have changed.
	Revision uint64 `json:"revision"`
	// Fits counts envelopes of the placement the ready nodes could take now
	// (a node with room for two counts two). Advisory.
	Fits int `json:"fits"`
}
