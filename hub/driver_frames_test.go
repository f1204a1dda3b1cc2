package hub

import (
	"errors"
	"net/http"
	"testing"

	"github.com/vk-ci/vk/hub/api"
	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

func TestFrameAs(t *testing.T) {
	hb := dispatch.Heartbeat{State: dispatch.NodeDraining}
	for _, tc := range []struct {
		name string
		in   any
		ok   bool
	}{
		{"value", hb, true},
		{"pointer", &hb, true},
		{"other value", dispatch.Held{}, false},
		{"other pointer", &dispatch.Held{}, false},
		{"pointer to pointer", func() any { p := &hb; return &p }(), false},
		{"nil interface", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := frameAs[dispatch.Heartbeat](tc.in)
			if ok != tc.ok {
				t.Fatalf("frameAs[Heartbeat](%T) ok = %v, want %v", tc.in, ok, tc.ok)
			}
			if ok && got != hb {
				t.Fatalf("frameAs[Heartbeat](%T) = %+v, want %+v", tc.in, got, hb)
			}
		})
	}
}

func TestOnFrame(t *testing.T) {
	type rec struct{ got []dispatch.Lease }
	handle := onFrame(func(_ *Driver, r *rec, l dispatch.Lease) { r.got = append(r.got, l) })
	l := dispatch.Lease{Reservation: "r5", State: dispatch.LeaseHeld, RemainingSecs: 7}
	r := &rec{}
	if !handle(nil, r, l) || !handle(nil, r, &l) {
		t.Fatal("onFrame entry did not claim a Lease value or pointer")
	}
	if handle(nil, r, dispatch.Held{}) || handle(nil, r, &dispatch.Result{}) {
		t.Fatal("onFrame entry for Lease claimed another frame type")
	}
	if len(r.got) != 2 || r.got[0] != l || r.got[1] != l {
		t.Fatalf("handler saw %+v, want the lease twice", r.got)
	}
}

// both returns v as a value and as a pointer: the two forms a frame
// reaches the driver in.
func both[T any](v T) []any { return []any{v, &v} }

// TestNodeFrameTable checks that each node frame the driver acts on is
// claimed by exactly one entry of nodeFrames, in either form, and that
// frames it does not act on (output goes its own way; acks, keepalives)
// are claimed by none. The frames are empty, so each handler's only
// effect is a warning or a no-op on a record the driver does not hold.
// The driver's loop does not run: the test's goroutine is its owner.
func TestNodeFrameTable(t *testing.T) {
	cfg := Config{StateDir: t.TempDir()}
	cfg.Trace.Disabled = true
	d, err := newDriver(t.Context(), cfg, nil, memstore.New(), output.NewMem(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.w.close(); d.trace.Close() })
	claims := func(m any) (n int) {
		rec := &nodeRec{name: "probe"}
		for _, handle := range nodeFrames {
			if handle(d, rec, m) {
				n++
			}
		}
		return n
	}
	handled := [][]any{both(dispatch.Report{}), both(dispatch.Held{}), both(dispatch.Heartbeat{}), both(dispatch.OfferReply{}),
		both(dispatch.Lease{}), both(dispatch.JobUpdate{}), both(dispatch.Result{})}
	for _, forms := range handled {
		for _, m := range forms {
			if n := claims(m); n != 1 {
				t.Errorf("%T claimed by %d node frame handlers, want 1", m, n)
			}
		}
	}
	for _, forms := range [][]any{both(dispatch.Output{}), both(dispatch.Keepalive{}), both(dispatch.OutputAck{}), both(dispatch.Offer{})} {
		for _, m := range forms {
			if n := claims(m); n != 0 {
				t.Errorf("%T claimed by %d node frame handlers, want 0", m, n)
			}
		}
	}
}

// TestValueFrames plays the relay and the node with frames as values (the
// harness sends pointers, as the session layer does): a grant still
// comes, so the report, heartbeat and held values reached their handlers.
//
// spec: NSESS-11, ARB-12
func TestValueFrames(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	d := h.srv.Driver()
	if err := d.RelayConnected(ctx, h.relay, h.rsend); err != nil {
		t.Fatal(err)
	}
	rep := client.RelayReport{Concurrent: 10, Runners: []client.RunnerReport{
		{Name: "r1", Placement: testPlacement, RequestConcurrency: 1, TokenAccepted: true}}}
	hb := client.RelayHeartbeat{Runners: []client.RunnerHeartbeat{{Name: "r1", State: client.RunnerPolling}}}
	for _, m := range []client.RelayMessage{rep, hb} {
		if err := d.RelayFrame(ctx, h.relay, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.NodeConnected(ctx, "n1", h.node, false); err != nil {
		t.Fatal(err)
	}
	h.nodeSay(dispatch.Report{Resources: dispatch.Resources{Mem: 8 << 30, Disk: 40 << 30, CPUs: 8}, Pools: []string{"linux"}, Labels: []string{"ssd"}})
	h.nodeSay(dispatch.Held{})
	tk := h.reserve()
	off := expectFrame[dispatch.Offer](h)
	h.nodeSay(dispatch.OfferReply{Reservation: off.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: 90})
	var g client.ReservationGrant
	h.want(http.StatusCreated, &g, "GET", "/v1/reservations/tickets/"+tk, nil)
	if g.Reservation != off.Reservation || g.Node != "n1" {
		t.Fatalf("grant = %+v, want reservation %s on n1", g, off.Reservation)
	}
}

// TestOwnJob checks the one gate of the job endpoints (Job,
// OutputReadable, Cancel, Settle): what is held, whose it is, and that
// only the owner is answered with the job.
//
// spec: API-50
func TestOwnJob(t *testing.T) {
	h := newHarness(t)
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	v := h.submitOn(h.claimed(), 7)
	expectFrame[dispatch.Start](h)
	d := h.srv.Driver()
	owner, stranger := api.Principal{ID: h.relay}, api.Principal{ID: "relay-2"}

	for _, tc := range []struct {
		name     string
		p        api.Principal
		id       string
		wantHeld bool
		wantView bool        // answered with the job's view
		wantCode client.Code // "" for no error
	}{
		{"owner", owner, v.ID, true, true, ""},
		{"stranger", stranger, v.ID, true, false, client.CodeNotFound},
		{"malformed", owner, "bogus", false, false, client.CodeNotFound},
		{"not held", owner, "0123456789abcdef", false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &jobReq{principal: tc.p.ID, id: tc.id}
			err := d.ownJob(t.Context(), r)
			if gotView := r.view.ID != ""; r.held != tc.wantHeld || gotView != tc.wantView {
				t.Fatalf("ownJob(%s, %s) held %v view %+v, want held %v, a view %v", tc.p.ID, tc.id, r.held, r.view, tc.wantHeld, tc.wantView)
			}
			if tc.wantView && (r.view.ID != tc.id || r.wake == nil) {
				t.Errorf("ownJob(%s, %s) answered job %s (wake %v), want %s with its wake channel", tc.p.ID, tc.id, r.view.ID, r.wake, tc.id)
			}
			var ae *api.Error
			switch {
			case tc.wantCode != "":
				if !errors.As(err, &ae) || ae.Code != tc.wantCode {
					t.Fatalf("ownJob(%s, %s) error %v, want code %s", tc.p.ID, tc.id, err, tc.wantCode)
				}
			case err != nil:
				t.Fatalf("ownJob(%s, %s) error %v, want none", tc.p.ID, tc.id, err)
			}
		})
	}
}
