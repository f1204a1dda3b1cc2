package hub

import (
	"net/http"
	"testing"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// admin's ceiling contract end to end:
// 0 takes no new placed work, NoCeiling removes the ceiling; the core
// (capacity), the admin view, the settings frame and a restart agree.
//
// spec: OPS-02, PLACE-04, PLACE-07
func TestCeilingZeroAndNone(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.enrolNode("n1")
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	fits := func() int {
		var c client.Capacity
		h.want(http.StatusOK, &c, "POST", "/v1/capacity", client.CapacityRequest{Placement: testPlacement})
		return c.Fits
	}
	unbounded := fits()
	if unbounded < 2 {
		t.Fatalf("fits without a ceiling = %d; the test needs room for 2", unbounded)
	}
	steps := []struct {
		set       int
		frame     dispatch.Settings
		fits      int
		adminView int
	}{
		{set: 0, frame: dispatch.Settings{CeilingZero: true}, fits: 0, adminView: 0},
		{set: 1, frame: dispatch.Settings{Ceiling: 1}, fits: 1, adminView: 1},
		{set: 0, frame: dispatch.Settings{CeilingZero: true}, fits: 0, adminView: 0},
		{set: admin.NoCeiling, frame: dispatch.Settings{}, fits: unbounded, adminView: admin.NoCeiling},
		{set: 0, frame: dispatch.Settings{CeilingZero: true}, fits: 0, adminView: 0},
	}
	for i, s := range steps {
		if err := h.srv.Driver().SetCeiling(ctx, "n1", s.set); err != nil {
			t.Fatalf("step %d: SetCeiling(%d): %v", i, s.set, err)
		}
		got := expectFrame[dispatch.Settings](h)
		if got.Ceiling != s.frame.Ceiling || got.CeilingZero != s.frame.CeilingZero || got.Drain {
			t.Errorf("step %d: settings frame = %+v, want %+v", i, got, s.frame)
		}
		if f := fits(); f != s.fits {
			t.Errorf("step %d: ceiling %d: fits = %d, want %d", i, s.set, f, s.fits)
		}
		nodes, err := h.srv.Driver().Nodes(ctx)
		if err != nil || len(nodes) != 1 || nodes[0].Ceiling != s.adminView {
			t.Errorf("step %d: nodes = %+v, %v; want ceiling %d", i, nodes, err, s.adminView)
		}
	}
	// The 0 survives a restart: the core gets it before the node reports.
	h.restart()
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	if got := expectFrame[dispatch.Settings](h); !got.CeilingZero {
		t.Errorf("settings after restart = %+v, want ceiling_zero", got)
	}
	if f := fits(); f != 0 {
		t.Errorf("fits after restart under ceiling 0 = %d, want 0", f)
	}
	if nodes, _ := h.srv.Driver().Nodes(ctx); len(nodes) != 1 || nodes[0].Ceiling != 0 {
		t.Errorf("nodes after restart = %+v, want ceiling 0", nodes)
	}
	if err := h.srv.Driver().SetCeiling(ctx, "n1", -2); err == nil {
		t.Error("SetCeiling(-2) succeeded")
	}
}

// the hub's drain reaches the node in its settings
// frame and undraining clears it.
//
// spec: OPS-02, NODE-05
func TestDrainTellsNode(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	h.enrolNode("n1")
	h.relayUp(1)
	h.nodeUp(dispatch.Held{})
	for _, on := range []bool{true, false} {
		if err := h.srv.Driver().Drain(ctx, "n1", on); err != nil {
			t.Fatal(err)
		}
		if got := expectFrame[dispatch.Settings](h); got.Drain != on {
			t.Errorf("drain %v: settings frame = %+v", on, got)
		}
	}
}

// Lifting a ceiling tells the node before it offers it anything: the
// settings frame goes out ahead of the offers the new room allows, so the
// node does not refuse them on its old ceiling (which would skip those
// tickets for 2 s, ARB-23, and hand the room to whoever asked later,
// against the fair-share order of ARB-09).
//
// spec: OPS-02, ARB-09, ARB-23
func TestCeilingLiftSettingsBeforeOffers(t *testing.T) {
	for _, lift := range []int{1, admin.NoCeiling} {
		h := newHarness(t)
		ctx := t.Context()
		h.enrolNode("n1")
		h.relayUp(1)
		h.nodeUp(dispatch.Held{})
		if err := h.srv.Driver().SetCeiling(ctx, "n1", 0); err != nil {
			t.Fatal(err)
		}
		expectFrame[dispatch.Settings](h)
		h.reserve() // waits: the node takes no new work
		h.noFrame()
		if err := h.srv.Driver().SetCeiling(ctx, "n1", lift); err != nil {
			t.Fatal(err)
		}
		if got := expectFrame[dispatch.Settings](h); got.CeilingZero {
			t.Fatalf("lift to %d: settings %+v still say ceiling 0", lift, got)
		}
		if off := expectFrame[dispatch.Offer](h); off.Reservation == "" {
			t.Fatalf("lift to %d: offer %+v names no reservation", lift, off)
		}
	}
}
