package session

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/internal/wsconn"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// spec: NSESS-02, NSESS-01
// The per-session state checks each frame without a network: versions,
// seq order, duplicates, heartbeat times.
func TestStateInbound(t *testing.T) {
	job := dispatch.OfferReply{Reservation: "r", Reply: dispatch.ReplyAccepted}
	egress := dispatch.Egress{Job: "j"}
	tests := []struct {
		name        string
		version     int
		lastIn      uint64
		seq         uint64
		msg         dispatch.Message
		wantDeliver bool
		wantErr     error
		wantLastIn  uint64
	}{
		{"job message in a v2 session", 2, 0, 1, job, false, ErrProtocol, 0},
		{"job message in a v3 session", 3, 0, 1, job, true, nil, 1},
		{"egress in a v5 session", 5, 4, 5, egress, false, ErrProtocol, 4},
		{"egress in a v6 session", 6, 4, 5, egress, true, nil, 5},
		{"report in a v1 session", 1, 0, 1, dispatch.Report{}, true, nil, 1},
		{"keepalive carries no seq", 3, 7, 0, dispatch.Keepalive{}, false, nil, 7},
		{"duplicate", 3, 7, 6, dispatch.Report{}, false, nil, 7},
		{"gap", 3, 7, 9, dispatch.Report{}, false, ErrProtocol, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := State{Version: tt.version, LastIn: tt.lastIn}
			deliver, err := st.Inbound(tt.seq, dispatch.MinVersion(tt.msg), false, t0)
			if deliver != tt.wantDeliver || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Inbound = %v, %v; want %v, %v", deliver, err, tt.wantDeliver, tt.wantErr)
			}
			if st.LastIn != tt.wantLastIn || !st.LastSeen.Equal(t0) {
				t.Fatalf("state = %+v, want LastIn %d", st, tt.wantLastIn)
			}
		})
	}
	st := State{Version: 6}
	st.Inbound(1, 1, true, t0.Add(time.Second))
	st.Inbound(2, 1, false, t0.Add(2*time.Second))
	if !st.LastHeartbeat.Equal(t0.Add(time.Second)) || !st.LastSeen.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("times = %+v", st)
	}
}

// spec: NSESS-02
// A job message in a session below version 3, decoded from the wire, is
// a protocol error at the session level (the real ranges cannot produce
// such a session: the hub refuses nodes below 3).
func TestNodeFrameJobBelowV3(t *testing.T) {
	st := State{Version: 2}
	b := mustEncode(t, dispatch.Frame{Seq: 1, Msg: dispatch.JobUpdate{Job: "j", State: dispatch.JobAccepted}})
	if _, _, err := nodeFrame(&st, b, t0); !errors.Is(err, ErrProtocol) {
		t.Fatalf("job message at v2 = %v, want ErrProtocol", err)
	}
	st = State{Version: 3}
	if m, deliver, err := nodeFrame(&st, b, t0); err != nil || !deliver || m.FrameKind() != dispatch.KindJob {
		t.Fatalf("job message at v3 = %v %v %v", m, deliver, err)
	}
}

// Property: over any sequence of seqs, each seq is delivered at most
// once, deliveries are exactly 1, 2, 3, … in order, and the first gap
// is an error.
func TestStateSeqProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		st := State{Version: dispatch.Version}
		var delivered []uint64
		for i, seq := range rapid.SliceOf(rapid.Uint64Range(0, 12)).Draw(t, "seqs") {
			before := st.LastIn
			ok, err := st.Inbound(seq, 1, false, t0)
			switch {
			case seq == 0 || seq <= before:
				if ok || err != nil {
					t.Fatalf("step %d: seq %d after %d = %v %v", i, seq, before, ok, err)
				}
			case seq == before+1:
				if !ok || err != nil {
					t.Fatalf("step %d: next seq %d = %v %v", i, seq, ok, err)
				}
				delivered = append(delivered, seq)
			default:
				if ok || !errors.Is(err, ErrProtocol) {
					t.Fatalf("step %d: gap seq %d after %d = %v %v", i, seq, before, ok, err)
				}
				return // the session ends here
			}
		}
		for i, s := range delivered {
			if s != uint64(i+1) {
				t.Fatalf("delivered %v", delivered)
			}
		}
	})
}

func TestHeartbeatPeriod(t *testing.T) {
	tests := []struct{ base, rate, n, want int }{
		{5, 5000, 1, 5},
		{5, 5000, 25000, 5},
		{5, 5000, 30000, 6},
		{5, 1000, 30000, 30},
	}
	for _, tt := range tests {
		if got := HeartbeatPeriod(tt.base, tt.rate, tt.n); got != tt.want {
			t.Errorf("HeartbeatPeriod(%d, %d, %d) = %d, want %d", tt.base, tt.rate, tt.n, got, tt.want)
		}
	}
}

// FuzzNodeFrame: frames from a node are untrusted. Whatever the bytes,
// nodeFrame does not panic, delivers only the next seq, and never moves
// LastIn backwards.
func FuzzNodeFrame(f *testing.F) {
	f.Add(uint8(6), uint64(0), mustEncode(f, dispatch.Frame{Seq: 1, Msg: dispatch.Report{Host: "h"}}))
	f.Add(uint8(2), uint64(0), mustEncode(f, dispatch.Frame{Seq: 1, Msg: dispatch.Held{}}))
	f.Add(uint8(6), uint64(3), mustEncode(f, dispatch.Frame{Seq: 4, Msg: dispatch.Output{Job: "j", Offset: 0, Data: []byte("hi")}}))
	f.Add(uint8(6), uint64(0), []byte(`{"type":"keepalive"}`))
	f.Add(uint8(6), uint64(0), []byte(`{"type":"job","kind":"offer","seq":1}`))
	f.Add(uint8(6), uint64(0), []byte(`{"type":"error","code":"zzz","message":"x"}`))
	f.Add(uint8(3), uint64(0), []byte(`[1,2,3]`))
	f.Fuzz(func(t *testing.T, version uint8, lastIn uint64, b []byte) {
		st := State{Version: int(version), LastIn: lastIn}
		m, deliver, err := nodeFrame(&st, b, t0)
		if st.LastIn < lastIn {
			t.Fatalf("LastIn moved back: %d -> %d", lastIn, st.LastIn)
		}
		if deliver {
			if err != nil || m == nil || st.LastIn != lastIn+1 || !fromNode(m) || dispatch.MinVersion(m) > int(version) {
				t.Fatalf("delivered %T (err %v) with LastIn %d -> %d at version %d", m, err, lastIn, st.LastIn, version)
			}
		} else if st.LastIn != lastIn {
			t.Fatalf("not delivered but LastIn moved %d -> %d", lastIn, st.LastIn)
		}
	})
}

// FuzzRelayFrame: frames from a relay are untrusted. Whatever the bytes,
// relayFrame does not panic, delivers only the next seq, and never
// delivers a report over the limits (RSESS-09).
func FuzzRelayFrame(f *testing.F) {
	enc := func(fr client.RelayFrame) []byte {
		b, err := client.EncodeRelayFrame(fr)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(uint64(0), enc(client.RelayFrame{Seq: 1, Msg: client.RelayReport{Runners: runners(2, 4)}}))
	f.Add(uint64(0), enc(client.RelayFrame{Seq: 1, Msg: client.RelayReport{Runners: runners(65, 1)}}))
	f.Add(uint64(4), enc(client.RelayFrame{Seq: 5, Msg: client.RelayHeartbeat{}}))
	f.Add(uint64(0), []byte(`{"type":"keepalive"}`))
	f.Add(uint64(0), []byte(`{"type":"server_status","seq":1,"status":"approved"}`))
	f.Add(uint64(0), []byte(`{"type":"report","seq":1,"runners":[{"name":"a","request_concurrency":129}]}`))
	f.Fuzz(func(t *testing.T, lastIn uint64, b []byte) {
		st := State{Version: client.RelayVersion, LastIn: lastIn}
		m, deliver, err := relayFrame(&st, b, t0)
		if deliver {
			if err != nil || st.LastIn != lastIn+1 {
				t.Fatalf("delivered with err %v, LastIn %d -> %d", err, lastIn, st.LastIn)
			}
			if r, ok := m.(*client.RelayReport); ok && CheckRelayLimits(r) != nil {
				t.Fatalf("delivered a report over the limits")
			}
		} else if st.LastIn != lastIn {
			t.Fatalf("not delivered but LastIn moved %d -> %d", lastIn, st.LastIn)
		}
	})
}

// spec: NSESS-02
// The driver cannot send a job message into a session below version 3:
// Send refuses it and nothing is queued; the session goes on.
func TestSendJobBelowV3(t *testing.T) {
	s := &NodeSession{core: core{out: wsconn.NewOutbox(4), clk: clock.Real{}, log: testlog.Discard()}}
	s.st.Version = 2
	if err := s.Send(dispatch.Offer{Reservation: "r"}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Send(offer) at v2 = %v, want ErrProtocol", err)
	}
	if err := s.Send(dispatch.Settings{Ceiling: 1}); err != nil || s.out.LastSeq() != 1 || s.Ended() != nil {
		t.Fatalf("Send(settings) at v2 = %v, last seq %d, ended %v", err, s.out.LastSeq(), s.Ended())
	}
}
