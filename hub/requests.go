package hub

import (
	"context"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// request is one input of the driver's owner loop, handled on its
// goroutine by [Driver.handle]: a session event (a node or relay came,
// went or sent a frame), a call of the API, admin or UI adapters, or the
// tick. Each is a struct of its inputs and, for a call, of the answer its
// handler fills in. None carries a function, so what the loop does is
// what handle lists (requests_test.go keeps it so).
type request interface{ request() }

// reply is embedded in the adapters' requests: the error their handler
// answers. It makes the struct (as a pointer) a request.
type reply struct{ err error }

func (*reply) request()        {}
func (r *reply) answer() error { return r.err }

// envelope carries a request to the owner loop; done is closed once it
// was handled.
type envelope struct {
	req  request
	done chan struct{}
}

// ask hands r to the owner loop and waits until it was handled; ctx
// bounds the wait for the loop to take it (once taken, it runs to
// completion).
func (d *Driver) ask(ctx context.Context, r request) error {
	e := envelope{req: r, done: make(chan struct{})}
	select {
	case d.in <- e:
	case <-ctx.Done():
		return ctx.Err()
	}
	<-e.done
	return nil
}

// call asks r and returns the error its handler answered, or ctx's when
// the loop did not take r in time.
func (d *Driver) call(ctx context.Context, r interface {
	request
	answer() error
}) error {
	if err := d.ask(ctx, r); err != nil {
		return err
	}
	return r.answer()
}

// The session events: what the session adapter's methods (NodeConnected,
// NodeFrame, RelayFrame, …) hand to the owner loop.
type (
	nodeUp struct {
		node    string
		send    NodeSender
		resumed bool
	}
	nodeDown struct{ node string }
	nodeMsg  struct {
		node string
		msg  dispatch.Message
	}
	// outputStored: len bytes of a job's output are durable.
	outputStored struct {
		job string
		len int64
	}
	relayUp struct {
		relay string
		send  RelaySender
	}
	relayDown struct{ relay string }
	relayMsg  struct {
		relay string
		msg   client.RelayMessage
	}
	// tick: time passes (the loop's timer; tests send it to run one now).
	tick struct{}
)

func (nodeUp) request()       {}
func (nodeDown) request()     {}
func (nodeMsg) request()      {}
func (outputStored) request() {}
func (relayUp) request()      {}
func (relayDown) request()    {}
func (relayMsg) request()     {}
func (tick) request()         {}

// handle carries out one request on the owner goroutine: every input of
// the loop is one case here.
func (d *Driver) handle(r request) {
	switch r := r.(type) {
	case tick:
		d.onTick()
	// Sessions (driver_node.go, driver_relay.go).
	case nodeUp:
		d.onNodeUp(r)
	case nodeDown:
		d.onNodeDown(r)
	case nodeMsg:
		d.onNodeMsg(r)
	case outputStored:
		d.onOutputStored(r)
	case *outputStateReq:
		d.onOutputState(r)
	case relayUp:
		d.onRelayUp(r)
	case relayDown:
		d.onRelayDown(r)
	case relayMsg:
		d.onRelayMsg(r)
	// The client API (driver_api.go, driver_jobs.go).
	case *capacityReq:
		d.onCapacity(r)
	case *reserveReq:
		d.onReserve(r)
	case *pollReq:
		d.onPoll(r)
	case *cancelTicketReq:
		d.onCancelTicket(r)
	case *claimReq:
		d.onClaim(r)
	case *outcomeReq:
		d.onOutcome(r)
	case *renewReq:
		d.onRenew(r)
	case *releaseReq:
		d.onRelease(r)
	case *submitReq:
		d.onSubmit(r)
	case *endAdmissionReq:
		d.endAdmission(r.principal, r.admission)
	case *jobReq:
		d.onJob(r)
	case countJobsReq:
		d.countJobs()
	// The admin socket (admin_backend.go).
	case *nodesReq:
		d.onNodes(r)
	case *nodeChangeReq:
		d.onNodeChange(r)
	case *policyReq:
		d.onPolicy(r)
	case setPolicyReq:
		d.onSetPolicy(r)
	case *relaySenderReq:
		if rr := d.relays[r.relay]; rr != nil {
			r.send = rr.send
		}
	case *nodeRemovedReq:
		d.onNodeRemoved(r)
	case approvalReq:
		d.onApproval(r)
	// The web UI (ui_backend.go).
	case *queueReq:
		d.onQueue(r)
	case *relaysReq:
		d.onRelays(r)
	}
}
