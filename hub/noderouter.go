package hub

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/vk-ci/vk/hub/session"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/dispatch"
)

// nodeRouter is the node session handler of every hub instance. While a
// standby it keeps each node's latest report and heartbeat: the fleet
// picture a standby builds from the same reports the leader gets (BS-13,
// BS-14). Once this instance leads it hands every session event to the
// driver, which alone acts (BS-15) and alone keeps each node's last report
// (the router's copies go to it at the takeover and are dropped); its
// frames to nodes carry the lease epoch, so nodes refuse a deposed
// leader's commands.
//
// At a takeover the sessions already up are handed to the new driver as
// new sessions, and each node is sent its settings with the new epoch:
// the node, hearing a newer leader, sends its report and held again and
// resends output from the last acked offset, as after a hub restart
// (DECISIONS 6) but without a reconnection. Until that held arrives the
// node's other frames (answers to the old leader, output past what is
// stored) are dropped.
type nodeRouter struct {
	ctx context.Context
	log *slog.Logger
	met *metrics

	phase sync.RWMutex // read: an event handed on; write: a takeover
	drv   *Driver      // nil while a standby; guarded by phase
	epoch uint64       // guarded by phase

	mu    sync.Mutex
	nodes map[string]*routed // by node ID; guarded by mu
}

// routed is one node as the router knows it; its fields are guarded by
// the router's mu.
type routed struct {
	s  *session.NodeSession
	up bool
	// report and heartbeat are the node's latest, kept while a standby
	// only: the driver keeps its own.
	report    *dispatch.Report
	heartbeat *dispatch.Heartbeat
	// resync: this instance took over while the session was up; until the
	// node's next held only reports and heartbeats are handed on.
	resync bool
}

var _ session.NodeHandler = (*nodeRouter)(nil)

func newNodeRouter(ctx context.Context, log *slog.Logger, met *metrics) *nodeRouter {
	return &nodeRouter{ctx: ctx, log: log, met: met, nodes: map[string]*routed{}}
}

// count is the number of node sessions up.
func (r *nodeRouter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, x := range r.nodes {
		if x.up {
			n++
		}
	}
	return n
}

func (r *nodeRouter) NodeUp(s *session.NodeSession, _ *dispatch.Hello, resumed bool) {
	r.mu.Lock()
	x := r.nodes[s.Node()]
	if x == nil || x.s != s {
		x = &routed{}
		r.nodes[s.Node()] = x
	}
	x.s, x.up = s, true
	if !resumed {
		x.resync = false
	}
	r.mu.Unlock()
	r.phase.RLock()
	defer r.phase.RUnlock()
	if r.drv != nil {
		r.connect(s, resumed)
	}
}

// connect hands s to the driver and, on a new session under a lease,
// makes sure the node hears this leader's epoch (the driver sends
// settings only when an operator set some).
func (r *nodeRouter) connect(s *session.NodeSession, resumed bool) {
	snd := &epochSender{s: s, epoch: r.epoch}
	r.drv.NodeConnected(r.ctx, s.Node(), snd, resumed)
	if r.epoch != 0 && !resumed && !snd.settings.Load() {
		if err := snd.Send(dispatch.Settings{}); err != nil {
			r.log.Warn("send to node failed", logkey.NodeID, s.Node(), logkey.Err, err)
		}
	}
}

func (r *nodeRouter) NodeMessage(s *session.NodeSession, m dispatch.Message) {
	r.phase.RLock()
	defer r.phase.RUnlock()
	rep, isReport := frameAs[dispatch.Report](m)
	hb, isHeartbeat := frameAs[dispatch.Heartbeat](m)
	_, isHeld := frameAs[dispatch.Held](m)
	r.mu.Lock()
	forward := true
	if x := r.nodes[s.Node()]; x != nil && x.s == s {
		switch {
		case r.drv == nil && isReport:
			x.report = &rep
		case r.drv == nil && isHeartbeat:
			x.heartbeat = &hb
		case isHeld:
			x.resync = false
		case x.resync && !isReport && !isHeartbeat:
			forward = false
		}
	}
	r.mu.Unlock()
	if r.drv == nil {
		if isReport || isHeartbeat {
			r.met.add("vk_hub_standby_reports_total", 1)
		}
		return // a standby keeps the picture and acts on nothing
	}
	if !forward {
		r.log.Debug("node frame before its held after a takeover; dropped", logkey.NodeID, s.Node(),
			"type", string(m.FrameType()), "kind", string(m.FrameKind()))
		return
	}
	err := r.drv.NodeFrame(r.ctx, s.Node(), m)
	if errors.Is(err, ErrNodeProtocol) {
		r.log.Warn("node session ended: protocol error", logkey.NodeID, s.Node(), logkey.Err, err)
		s.End(dispatch.ErrorProtocol, err.Error())
	} else if errors.Is(err, ErrNodeResync) {
		// The node resends unacked output only on a new session (after its
		// held, NSESS-24): end this one, or the chunk is lost for good.
		r.log.Warn("node session ended: output not stored; the node resends it on a new session", logkey.NodeID, s.Node(), logkey.Err, err)
		s.End(dispatch.ErrorOther, err.Error())
	} else if err != nil {
		r.log.Warn("node frame not handled", logkey.NodeID, s.Node(), logkey.Err, err)
	}
}

func (r *nodeRouter) NodeDown(s *session.NodeSession, _ error) {
	r.mu.Lock()
	if x := r.nodes[s.Node()]; x != nil && x.s == s {
		x.up = false
	}
	r.mu.Unlock()
	r.phase.RLock()
	defer r.phase.RUnlock()
	if r.drv != nil {
		r.drv.NodeDisconnected(r.ctx, s.Node())
	}
}

// promote hands the router to drv, leading at epoch: every session up
// becomes a new session of the driver, seeded with the node's latest
// report (the driver's copy from now on: the router drops its own), and
// is told the new epoch.
func (r *nodeRouter) promote(drv *Driver, epoch uint64) {
	r.phase.Lock()
	defer r.phase.Unlock()
	r.drv, r.epoch = drv, epoch
	type up struct {
		s      *session.NodeSession
		report *dispatch.Report
	}
	var ups []up
	r.mu.Lock()
	for _, x := range r.nodes {
		if x.up {
			x.resync = epoch != 0
			ups = append(ups, up{x.s, x.report})
		}
		x.report, x.heartbeat = nil, nil
	}
	r.mu.Unlock()
	names := make([]string, len(ups))
	for i, u := range ups {
		names[i] = u.s.Node()
	}
	drv.TookOver(r.ctx, names)
	for _, u := range ups {
		r.connect(u.s, false)
		if u.report != nil {
			drv.NodeFrame(r.ctx, u.s.Node(), *u.report)
		}
	}
}

// epochSender stamps the leader's epoch on every command to one node
// session, and notes whether a settings frame went.
type epochSender struct {
	s        *session.NodeSession
	epoch    uint64
	settings atomic.Bool
}

func (e *epochSender) Send(m dispatch.Message) error {
	if _, ok := frameAs[dispatch.Settings](m); ok {
		e.settings.Store(true)
	}
	return e.s.Send(withEpoch(m, e.epoch))
}

// withEpoch returns m carrying epoch when it is a command (0 leaves m as
// it is). The command is copied, never changed in place: the driver may
// hold it.
func withEpoch(m dispatch.Message, epoch uint64) dispatch.Message {
	if epoch == 0 {
		return m
	}
	for _, stamp := range []func() (dispatch.Message, bool){
		func() (dispatch.Message, bool) { return stamped(m, func(v *dispatch.Offer) { v.Epoch = epoch }) },
		func() (dispatch.Message, bool) { return stamped(m, func(v *dispatch.Renew) { v.Epoch = epoch }) },
		func() (dispatch.Message, bool) { return stamped(m, func(v *dispatch.Release) { v.Epoch = epoch }) },
		func() (dispatch.Message, bool) { return stamped(m, func(v *dispatch.Start) { v.Epoch = epoch }) },
		func() (dispatch.Message, bool) { return stamped(m, func(v *dispatch.Cancel) { v.Epoch = epoch }) },
		func() (dispatch.Message, bool) { return stamped(m, func(v *dispatch.OutputAck) { v.Epoch = epoch }) },
		func() (dispatch.Message, bool) { return stamped(m, func(v *dispatch.Settings) { v.Epoch = epoch }) },
	} {
		if s, ok := stamp(); ok {
			return s
		}
	}
	return m
}

// stamped applies set to a copy of m when m is a T or a *T, and returns
// the copy in the same form.
func stamped[T any](m dispatch.Message, set func(*T)) (dispatch.Message, bool) {
	switch v := any(m).(type) {
	case T:
		set(&v)
		return any(v).(dispatch.Message), true
	case *T:
		c := *v
		set(&c)
		return any(&c).(dispatch.Message), true
	}
	return m, false
}
