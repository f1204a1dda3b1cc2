package session

import (
	"sync"
	"sync/atomic"

	"github.com/vk-ci/vk/internal/sessionclient"
	"github.com/vk-ci/vk/proto/dispatch"
)

// fleet is the node's sessions to every hub instance it was given (one
// with a single hub). Every instance gets the node's reports, held and
// heartbeats, so each keeps the same fleet picture (BS-13, BS-14); the
// agent follows one session, the leader's, and sees one logical session
// through [Handler]: Connected, Message and Disconnected of that session
// only, plus the commands of any session that are not stale.
//
// The leader is the session whose commands carry the newest lease epoch
// (before any epoch is heard, the first session welcomed). Hearing a
// newer epoch on another session makes that session the followed one,
// and the agent is told of a new session (Connected, not resumed): it
// sends its report and held again and resends output from the last
// acked offset, which is what a hub that just took over needs. A command
// whose epoch is older than the newest heard is refused (fencing at the
// node, docs/ha.md): it comes from a deposed leader.
//
// Handler calls are serialised by mu (the agent expects one at a time);
// st guards the routing state Send reads, so the agent may call Send from
// inside a handler call.
type fleet struct {
	h       Handler
	log     interface{ Warn(string, ...any) }
	members []*member
	refused atomic.Uint64

	mu sync.Mutex // one handler call at a time

	st         sync.Mutex
	leader     int    // index of the followed session; -1 before any welcome; guarded by st
	newest     uint64 // newest epoch heard; guarded by st
	lastReport dispatch.Message
}

// member is one session of the fleet, the Handler its kind calls.
type member struct {
	f       *fleet
	i       int
	core    *sessionclient.Client[dispatch.Message, dispatch.Welcome]
	welcome dispatch.Welcome // the last one; guarded by f.mu
}

// follow returns the followed session (the first before any welcome).
func (f *fleet) follow() *member {
	f.st.Lock()
	defer f.st.Unlock()
	if f.leader < 0 {
		return f.members[0]
	}
	return f.members[f.leader]
}

// send routes one frame: reports and held to every instance, the rest to
// the followed one.
func (f *fleet) send(m dispatch.Message) error {
	switch m.FrameType() {
	case dispatch.TypeReport:
		f.st.Lock()
		f.lastReport = m
		f.st.Unlock()
		return f.broadcast(m)
	case dispatch.TypeJob:
		if m.FrameKind() == dispatch.KindHeld {
			return f.broadcast(m)
		}
	}
	return f.follow().core.Send(m)
}

// broadcast sends m on every session; the followed session's error is
// the one returned (a standby's full queue only costs it a new session).
func (f *fleet) broadcast(m dispatch.Message) error {
	lead := f.follow()
	var err error
	for _, x := range f.members {
		if e := x.core.Send(m); x == lead {
			err = e
		}
	}
	return err
}

func (m *member) Connected(w dispatch.Welcome) {
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	m.welcome = w
	f.st.Lock()
	if f.leader < 0 {
		f.leader = m.i
	}
	lead := f.leader == m.i
	rep := f.lastReport
	f.st.Unlock()
	if lead {
		f.h.Connected(w)
		return
	}
	if !w.Resumed && rep != nil {
		// Another instance's new session: it gets the node's report for
		// its picture; held follows at the next change of leader.
		m.core.Send(rep)
	}
}

func (m *member) Message(msg dispatch.Message) {
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	epoch, command := epochOf(msg)
	f.st.Lock()
	stale := command && epoch < f.newest
	switched := false
	if command && epoch > f.newest {
		f.newest = epoch
		if f.leader != m.i {
			f.leader, switched = m.i, true
		}
	}
	newest := f.newest
	f.st.Unlock()
	if stale {
		f.refused.Add(1)
		f.log.Warn("command from a deposed hub leader refused", "type", string(msg.FrameType()), "kind", string(msg.FrameKind()),
			"epoch", epoch, "newest_epoch", newest)
		if o, ok := msg.(*dispatch.Offer); ok {
			m.core.Send(&dispatch.OfferReply{Reservation: o.Reservation, Reply: dispatch.ReplyRefused,
				Reason: dispatch.RefusalNotReady, Message: "stale hub leader epoch"})
		}
		return
	}
	if switched {
		// A newer leader: the agent starts over with it as after a new
		// session.
		w := m.welcome
		w.Resumed = false
		f.h.Connected(w)
	}
	f.h.Message(msg)
}

func (m *member) Disconnected(err error) {
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.follow() == m {
		f.h.Disconnected(err)
	}
}

func (m *member) Heartbeat() dispatch.Heartbeat {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	return m.f.h.Heartbeat()
}

// epochOf returns a hub command's leader epoch; command is false for
// frames that carry none.
func epochOf(m dispatch.Message) (epoch uint64, command bool) {
	switch v := m.(type) {
	case *dispatch.Offer:
		return v.Epoch, true
	case *dispatch.Renew:
		return v.Epoch, true
	case *dispatch.Release:
		return v.Epoch, true
	case *dispatch.Start:
		return v.Epoch, true
	case *dispatch.Cancel:
		return v.Epoch, true
	case *dispatch.OutputAck:
		return v.Epoch, true
	case *dispatch.Settings:
		return v.Epoch, true
	}
	return 0, false
}
