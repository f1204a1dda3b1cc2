package hub

import (
	"context"

	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// Session frames reach the driver in two forms: the session layer decodes
// them into pointers (dispatch.Decode, client.DecodeRelayFrame return
// *Report, *Heartbeat, …) while in-process callers and tests pass values.
// The driver's handlers take values; frameAs and onFrame accept both, so
// each handler is named once in its table (nodeFrames, relayFrames)
// instead of once per form.

// frameAs returns m as a T when m is a T or a *T (dereferenced; a nil *T
// panics: the decoders never yield one). ok is false for any other type.
func frameAs[T any](m any) (v T, ok bool) {
	switch m := m.(type) {
	case T:
		return m, true
	case *T:
		return *m, true
	}
	return v, false
}

// onFrame adapts handle, a driver method for one frame type T on a
// session's record R (*nodeRec, *relayRec), into a table entry: the entry
// calls handle and returns true when m is a T or *T, and returns false
// without calling it otherwise.
func onFrame[R, T any](handle func(*Driver, R, T)) func(*Driver, R, any) bool {
	return func(d *Driver, r R, m any) bool {
		v, ok := frameAs[T](m)
		if ok {
			handle(d, r, v)
		}
		return ok
	}
}

// sessionEvent is one input from a node or relay session: the session
// adapter's methods (NodeConnected, NodeFrame, RelayFrame, …) send them to
// the owner loop, which hands each to its handler (onSession).
type sessionEvent interface{ sessionEvent() }

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

func (nodeUp) sessionEvent()       {}
func (nodeDown) sessionEvent()     {}
func (nodeMsg) sessionEvent()      {}
func (outputStored) sessionEvent() {}
func (relayUp) sessionEvent()      {}
func (relayDown) sessionEvent()    {}
func (relayMsg) sessionEvent()     {}

// sessionReq carries an event to the owner loop; done is closed once it
// was handled.
type sessionReq struct {
	ev   sessionEvent
	done chan struct{}
}

// session hands ev to the owner loop and waits until it was handled; ctx
// bounds the wait for the loop to take it (once taken, it runs to
// completion).
func (d *Driver) session(ctx context.Context, ev sessionEvent) error {
	r := sessionReq{ev: ev, done: make(chan struct{})}
	select {
	case d.sessc <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	<-r.done
	return nil
}

// onSession handles one session event on the owner goroutine.
func (d *Driver) onSession(ev sessionEvent) {
	switch e := ev.(type) {
	case nodeUp:
		d.onNodeUp(e)
	case nodeDown:
		d.onNodeDown(e)
	case nodeMsg:
		d.onNodeMsg(e)
	case outputStored:
		d.onOutputStored(e)
	case relayUp:
		d.onRelayUp(e)
	case relayDown:
		d.onRelayDown(e)
	case relayMsg:
		d.onRelayMsg(e)
	case takeoverNodes:
		d.onTookOver(e)
	}
}
