// Package logkey holds the attribute keys every vk component logs with, so
// dashboards and greps never chase renamed fields (STYLE C14). Use them as
// `log.With(logkey.JobID, id)`.
package logkey

// Attribute keys. Values are stable: renaming one is a breaking change for
// operators' queries.
const (
	JobID       = "job_id"      // hub job ID
	GitLabJobID = "gitlab_job"  // GitLab's job ID
	TicketID    = "ticket_id"   // reservation ticket
	Reservation = "reservation" // reservation ID
	Admission   = "admission"   // admission ID
	NodeID      = "node_id"     // enrolled node
	RelayID     = "relay_id"    // enrolled relay
	RunnerID    = "runner_id"   // relay runner (name)
	RequestID   = "request_id"  // idempotency key of a create
	Tenant      = "tenant"      // capacity-policy tenant
	Session     = "session"     // session handle
	Stage       = "stage"       // job stage
	Err         = "err"         // an error
	Route       = "route"       // HTTP route pattern
	Status      = "status"      // HTTP status
	Component   = "component"   // hub, node, relay, gitlabfake
)
