package hub

import (
	"context"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// request is one input of the driver's owner loop beside its tick,
// carried out on its goroutine by its run: a session event (a node or
// relay came, went or sent a frame) or a call of the API, admin or UI
// adapters. Each is a struct of its inputs and, for a call, of the answer run fills
// in; none carries a function, so what the loop does is the code of the
// request types' run methods (requests_test.go keeps it so).
type request interface{ run(d *Driver) }

// reply is embedded in the adapters' requests that answer an error.
type reply struct{ err error }

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
	d.waiting.Add(1)
	select {
	case d.in <- e:
		d.waiting.Add(-1)
	case <-ctx.Done():
		d.waiting.Add(-1)
		return ctx.Err()
	}
	<-e.done
	return nil
}

// call asks r and returns the error its run answered, or ctx's when
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
)
