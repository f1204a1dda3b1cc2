package ledger

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/internal/deptest"
)

const (
	gib = int64(1) << 30
	sec = time.Second
)

func env(memGiB, diskGiB, cpus int64) Envelope {
	return Envelope{MemBytes: memGiB * gib, DiskBytes: diskGiB * gib, CPUs: cpus}
}

// node16 is a node with 16 GiB, 100 GiB disk, 8 vCPUs.
func node16() *Ledger { return New(Capacity{Total: env(16, 100, 8)}) }

// TestDeps pins the ledger as a pure package: standard library only, no
// clock, no I/O, no logging.
func TestDeps(t *testing.T) {
	deptest.StdlibOnly(t, "github.com/vk-ci/vk/node/ledger")
	deptest.Forbid(t, "github.com/vk-ci/vk/node/ledger", "net", "os/exec", "log/slog", "github.com/vk-ci/vk/internal/clock")
}

// spec: NODE-01, NSESS-21, PLACE-06, PLACE-08, NODE-05
func TestOfferRefusals(t *testing.T) {
	tests := []struct {
		name  string
		setup func(l *Ledger)
		env   Envelope
		lease int
		want  Reason
	}{
		{"fits", nil, env(4, 10, 2), 90, ""},
		{"memory short", func(l *Ledger) { l.Offer(0, "a", env(14, 1, 1), 90) }, env(4, 1, 1), 90, ReasonMemory},
		{"disk short", func(l *Ledger) { l.Offer(0, "a", env(1, 95, 1), 90) }, env(1, 10, 1), 90, ReasonDisk},
		{"cpus short", func(l *Ledger) { l.Offer(0, "a", env(1, 1, 7), 90) }, env(1, 1, 2), 90, ReasonCPUs},
		{"memory named first", nil, env(17, 101, 9), 90, ReasonMemory},
		{"too big for the node", nil, env(1, 1, 9), 90, ReasonCPUs},
		{"draining", func(l *Ledger) { l.SetState(StateDraining) }, env(1, 1, 1), 90, ReasonNotReady},
		{"drained", func(l *Ledger) { l.SetState(StateDrained) }, env(1, 1, 1), 90, ReasonNotReady},
		{"quarantined", func(l *Ledger) { l.SetState(StateQuarantined) }, env(1, 1, 1), 90, ReasonNotReady},
		{"maintenance", func(l *Ledger) { l.SetState(StateMaintenance) }, env(1, 1, 1), 90, ReasonNotReady},
		{"runner", func(l *Ledger) { l.SetRunner(true) }, env(1, 1, 1), 90, ReasonRunner},
		{"runner before not_ready", func(l *Ledger) { l.SetRunner(true); l.SetState(StateDraining) }, env(1, 1, 1), 90, ReasonRunner},
		{"ceiling zero", func(l *Ledger) { l.SetCeiling(0) }, env(1, 1, 1), 90, ReasonCeiling},
		{"ceiling reached", func(l *Ledger) { l.SetCeiling(1); l.Offer(0, "a", env(1, 1, 1), 90) }, env(1, 1, 1), 90, ReasonCeiling},
		{"concurrency reached", func(l *Ledger) { l.SetMaxConcurrency(1); l.Offer(0, "a", env(1, 1, 1), 90) }, env(1, 1, 1), 90, ReasonConcurrency},
		{"smaller limit names it: concurrency", func(l *Ledger) {
			l.SetCeiling(3)
			l.SetMaxConcurrency(2)
			l.Start(0, "j1", "", env(1, 1, 1))
			l.Start(0, "j2", "", env(1, 1, 1))
			l.Start(0, "j3", "", env(1, 1, 1))
		}, env(1, 1, 1), 90, ReasonConcurrency},
		{"smaller limit names it: ceiling", func(l *Ledger) {
			l.SetCeiling(1)
			l.SetMaxConcurrency(2)
			l.Start(0, "j1", "", env(1, 1, 1))
		}, env(1, 1, 1), 90, ReasonCeiling},
		{"cap counts jobs and reservations", func(l *Ledger) {
			l.SetMaxConcurrency(2)
			l.Start(0, "j1", "", env(1, 1, 1))
			l.Offer(0, "a", env(1, 1, 1), 90)
		}, env(1, 1, 1), 90, ReasonConcurrency},
		{"zero lease", nil, env(1, 1, 1), 0, ReasonInvalid},
		{"empty envelope", nil, Envelope{}, 90, ReasonInvalid},
		{"negative envelope", nil, Envelope{MemBytes: -1, CPUs: 1}, 90, ReasonInvalid},
		{"id reused with another envelope", func(l *Ledger) { l.Offer(0, "r", env(2, 1, 1), 90) }, env(1, 1, 1), 90, ReasonInvalid},
		{"id already ended", func(l *Ledger) { l.Offer(0, "r", env(1, 1, 1), 90); l.Release("r") }, env(1, 1, 1), 90, ReasonInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := node16()
			if tt.setup != nil {
				tt.setup(l)
			}
			got := l.Offer(0, "r", tt.env, tt.lease)
			if got.Reason != tt.want || got.Accepted != (tt.want == "") {
				t.Fatalf("Offer = %+v, want reason %q", got, tt.want)
			}
			if !got.Accepted && got.Reason != ReasonInvalid && got.Message == "" {
				t.Errorf("refusal %q has no message", got.Reason)
			}
		})
	}
}

// spec: NODE-02, NODE-03, NODE-04, ARB-30
func TestLeaseExpiry(t *testing.T) {
	l := node16()
	if r := l.Offer(10*sec, "a", env(8, 10, 4), 90); !r.Accepted || r.LeaseSecs != 90 {
		t.Fatalf("Offer a = %+v", r)
	}
	if r := l.Offer(10*sec, "b", env(8, 10, 4), 3600); !r.Accepted || r.LeaseSecs != MaxLeaseSecs {
		t.Fatalf("Offer b = %+v, want lease clamped to %d", r, MaxLeaseSecs)
	}
	// NODE-02: the reservation counts as granted memory while it lasts.
	if r := l.Offer(10*sec, "c", env(1, 1, 1), 90); r.Reason != ReasonMemory {
		t.Fatalf("Offer c on a full node = %+v, want memory", r)
	}
	if at, ok := l.NextExpiry(); !ok || at != 100*sec {
		t.Fatalf("NextExpiry = %v %v, want 100s", at, ok)
	}
	if got := l.Expire(100*sec - 1); len(got) != 0 {
		t.Fatalf("Expire before the deadline = %v", got)
	}
	if s := l.Renew(40*sec+500*time.Millisecond, "a", 0); !s.Held || s.RemainingSecs != 59 {
		t.Fatalf("Renew(0) = %+v, want held 59 (rounded down)", s)
	}
	if got := l.Expire(100 * sec); !cmp.Equal(got, []string{"a"}) {
		t.Fatalf("Expire(100s) = %v, want [a]", got)
	}
	if s := l.Renew(101*sec, "a", 90); s.Held || s.Why != GoneExpired {
		t.Fatalf("Renew after expiry = %+v, want gone expired", s)
	}
	// The freed memory is usable again.
	if r := l.Offer(101*sec, "c", env(8, 10, 4), 90); !r.Accepted {
		t.Fatalf("Offer after expiry = %+v", r)
	}
	// A renew extends from now, clamped.
	if s := l.Renew(200*sec, "b", 10_000); !s.Held || s.RemainingSecs != MaxLeaseSecs {
		t.Fatalf("Renew b = %+v, want %d", s, MaxLeaseSecs)
	}
	if got := l.Expire(10_000 * sec); !cmp.Equal(got, []string{"c", "b"}) {
		t.Fatalf("Expire = %v, want [c b] (earliest deadline first)", got)
	}
	if s := l.Renew(0, "never", 90); s.Why != GoneUnknown {
		t.Fatalf("Renew unknown = %+v", s)
	}
}

// spec: NODE-05
func TestDrainLetsLeasesLapseQuarantineReleases(t *testing.T) {
	l := node16()
	l.Offer(0, "a", env(1, 1, 1), 90)
	l.Offer(0, "b", env(1, 1, 1), 90)
	l.SetState(StateDraining)
	if s := l.Renew(30*sec, "a", 90); !s.Held || s.RemainingSecs != 60 {
		t.Fatalf("Renew while draining = %+v, want held 60 (not extended)", s)
	}
	if got := l.Expire(90 * sec); !cmp.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Expire = %v", got)
	}

	l = node16()
	l.Offer(0, "b", env(1, 1, 1), 90)
	l.Offer(0, "a", env(1, 1, 1), 90)
	l.Start(0, "j", "", env(1, 1, 1))
	if got := l.SetState(StateQuarantined); !cmp.Equal(got, []string{"a", "b"}) {
		t.Fatalf("quarantine released %v, want [a b]", got)
	}
	if s := l.Release("a"); s.Why != GoneReleased {
		t.Fatalf("Release after quarantine = %+v, want gone released", s)
	}
	if s := l.Snapshot(0); len(s.Reservations) != 0 || len(s.Jobs) != 1 || s.Used != env(1, 1, 1) {
		t.Fatalf("Snapshot after quarantine = %+v", s)
	}
	if r := l.Start(0, "k", "", env(1, 1, 1)); r.Reason != ReasonNotReady {
		t.Fatalf("Start while quarantined = %+v", r)
	}
}

// spec: NODE-07, PLACE-08, NSESS-13
func TestStartConvertsReservation(t *testing.T) {
	l := node16()
	l.SetMaxConcurrency(1)
	l.Offer(0, "r", env(4, 10, 2), 90)
	l.SetRunner(true)         // PLACE-08: held reservations still renew and start
	l.SetState(StateDraining) // and a drain still starts a job already taken
	l.SetState(StateReady)
	if s := l.Renew(10*sec, "r", 90); !s.Held || s.RemainingSecs != 90 {
		t.Fatalf("Renew with a local runner = %+v", s)
	}
	l.SetState(StateDraining)
	got := l.Start(20*sec, "j", "r", env(4, 10, 2))
	if !got.Accepted || !got.Converted || got.Granted != env(4, 10, 2) {
		t.Fatalf("Start = %+v", got)
	}
	if s := l.Renew(20*sec, "r", 90); s.Why != GoneStarted {
		t.Fatalf("Renew after start = %+v, want gone started", s)
	}
	s := l.Snapshot(20 * sec)
	want := []HeldJob{{ID: "j", Reservation: "r", Granted: env(4, 10, 2), Want: env(4, 10, 2)}}
	if diff := cmp.Diff(want, s.Jobs); diff != "" || len(s.Reservations) != 0 || s.Used != env(4, 10, 2) {
		t.Fatalf("Snapshot jobs (-want +got):\n%s\n%+v", diff, s)
	}
	// Redelivered start: answered accepted again, nothing counted twice.
	if r := l.Start(21*sec, "j", "r", env(4, 10, 2)); !r.Accepted || l.Snapshot(0).Used != env(4, 10, 2) {
		t.Fatalf("redelivered Start = %+v", r)
	}
}

// spec: NODE-08, PLACE-06, PLACE-08, NSESS-21
func TestStartWithoutReservation(t *testing.T) {
	tests := []struct {
		name        string
		setup       func(l *Ledger)
		reservation string
		env         Envelope
		want        Reason
	}{
		{"unknown reservation fits", nil, "gone", env(4, 4, 4), ""},
		{"no reservation fits", nil, "", env(4, 4, 4), ""},
		{"unknown reservation does not fit", nil, "gone", env(32, 4, 4), ReasonNoReservation},
		{"no reservation does not fit", nil, "", env(32, 4, 4), ReasonMemory},
		{"expired reservation does not fit", func(l *Ledger) {
			l.Offer(0, "gone", env(10, 1, 1), 1)
			l.Offer(0, "other", env(6, 1, 1), 90)
		}, "gone", env(12, 1, 1), ReasonNoReservation},
		{"runner", func(l *Ledger) { l.SetRunner(true) }, "gone", env(1, 1, 1), ReasonRunner},
		{"draining", func(l *Ledger) { l.SetState(StateDraining) }, "", env(1, 1, 1), ReasonNotReady},
		{"ceiling", func(l *Ledger) { l.SetCeiling(0) }, "gone", env(1, 1, 1), ReasonCeiling},
		{"concurrency", func(l *Ledger) { l.SetMaxConcurrency(1); l.Offer(0, "x", env(1, 1, 1), 90) }, "", env(1, 1, 1), ReasonConcurrency},
		{"invalid", nil, "", Envelope{CPUs: -1}, ReasonInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := node16()
			if tt.setup != nil {
				tt.setup(l)
			}
			got := l.Start(2*sec, "j", tt.reservation, tt.env)
			if got.Reason != tt.want || got.Accepted != (tt.want == "") || got.Converted {
				t.Fatalf("Start = %+v, want reason %q", got, tt.want)
			}
		})
	}
}

// spec: NODE-09, NODE-01
func TestResizeReturnsAndWaits(t *testing.T) {
	l := node16()
	l.Start(0, "big", "", env(8, 10, 4))
	l.Start(0, "j", "", env(4, 10, 2))
	// Shrinking returns the unneeded part at once.
	freed, waiting, err := l.Resize("j", env(2, 10, 1))
	if err != nil || waiting || freed != env(2, 0, 1) {
		t.Fatalf("Resize down = %v %v %v", freed, waiting, err)
	}
	// Growing past what is free waits for the rest, keeping what it has.
	freed, waiting, err = l.Resize("j", env(10, 10, 2))
	if err != nil || !waiting || freed != (Envelope{}) {
		t.Fatalf("Resize up = %v %v %v", freed, waiting, err)
	}
	// A waiting job is owed its rest before any new offer: 6 GiB are free,
	// 8 are owed, so even a small offer is refused memory.
	if r := l.Offer(0, "r", env(1, 1, 1), 90); r.Reason != ReasonMemory {
		t.Fatalf("Offer while a job waits = %+v, want memory", r)
	}
	if got := l.Granted(); len(got) != 0 {
		t.Fatalf("Granted before room = %v", got)
	}
	if err := l.Finish("big"); err != nil {
		t.Fatal(err)
	}
	if got := l.Granted(); !cmp.Equal(got, []string{"j"}) {
		t.Fatalf("Granted = %v, want [j]", got)
	}
	s := l.Snapshot(0)
	if s.Used != env(10, 10, 2) || s.Jobs[0].Waiting {
		t.Fatalf("Snapshot = %+v", s)
	}
	// Growing when there is room is granted at once, not via Granted.
	if _, waiting, _ := l.Resize("j", env(12, 10, 2)); waiting {
		t.Fatal("Resize with room waits")
	}
	if got := l.Granted(); len(got) != 0 {
		t.Fatalf("Granted after an immediate resize = %v", got)
	}
	if _, _, err := l.Resize("nope", env(1, 1, 1)); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("Resize unknown = %v", err)
	}
	if err := l.Finish("nope"); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("Finish unknown = %v", err)
	}
}

// spec: NODE-09
func TestWaitingQueueIsFIFO(t *testing.T) {
	l := node16()
	l.Start(0, "hog", "", env(16, 10, 2))
	l.Start(0, "a", "", env(0, 1, 1))
	l.Start(0, "b", "", env(0, 1, 1))
	l.Resize("a", env(10, 1, 1))
	l.Resize("b", env(2, 1, 1))
	l.Resize("hog", env(4, 10, 2)) // frees 12: a (10) then b (2)
	if got := l.Granted(); !cmp.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Granted = %v, want [a b]", got)
	}
	l = node16()
	l.Start(0, "hog", "", env(16, 10, 2))
	l.Start(0, "a", "", env(0, 1, 1))
	l.Start(0, "b", "", env(0, 1, 1))
	l.Resize("a", env(10, 1, 1))
	l.Resize("b", env(2, 1, 1))
	l.Resize("hog", env(12, 10, 2)) // frees 4: b would fit but a is first
	if got := l.Granted(); len(got) != 0 {
		t.Fatalf("Granted = %v, want none (strict FIFO)", got)
	}
	l.Finish("a")
	if got := l.Granted(); !cmp.Equal(got, []string{"b"}) {
		t.Fatalf("Granted after a finished = %v, want [b]", got)
	}
}

// spec: PLACE-07
func TestLoweredCeilingKeepsJobs(t *testing.T) {
	l := node16()
	l.Start(0, "a", "", env(1, 1, 1))
	l.Start(0, "b", "", env(1, 1, 1))
	l.SetCeiling(1)
	if s := l.Snapshot(0); len(s.Jobs) != 2 || s.Cap != 1 {
		t.Fatalf("Snapshot = %+v", s)
	}
	if r := l.Offer(0, "r", env(1, 1, 1), 90); r.Reason != ReasonCeiling {
		t.Fatalf("Offer = %+v", r)
	}
	l.ClearCeiling()
	if r := l.Offer(0, "r", env(1, 1, 1), 90); !r.Accepted {
		t.Fatalf("Offer after clearing = %+v", r)
	}
}

func TestAdopt(t *testing.T) {
	l := node16()
	l.Adopt("a", env(12, 1, 1))
	l.Adopt("b", env(12, 1, 1)) // over capacity: it already ran before the restart
	if r := l.Offer(0, "r", env(1, 1, 1), 90); r.Reason != ReasonMemory {
		t.Fatalf("Offer over capacity = %+v", r)
	}
	l.Finish("b")
	if r := l.Offer(0, "r", env(1, 1, 1), 90); !r.Accepted {
		t.Fatalf("Offer after finish = %+v", r)
	}
}

func TestRedeliveredOffer(t *testing.T) {
	l := node16()
	l.Offer(0, "r", env(1, 1, 1), 90)
	if r := l.Offer(30*sec, "r", env(1, 1, 1), 90); !r.Accepted || r.LeaseSecs != 60 {
		t.Fatalf("redelivered Offer = %+v, want accepted with 60 s left", r)
	}
	if s := l.Snapshot(30 * sec); s.Used != env(1, 1, 1) {
		t.Fatalf("Used = %+v, counted twice", s.Used)
	}
}

// The reason names are the wire's; the session passes them through as they
// are, so they are pinned here.
// spec: NSESS-21, NSESS-13
func TestWireNames(t *testing.T) {
	got := []string{}
	for _, r := range []Reason{ReasonMemory, ReasonDisk, ReasonCPUs, ReasonNotReady, ReasonPolicy,
		ReasonNoReservation, ReasonInvalid, ReasonCeiling, ReasonConcurrency, ReasonRunner} {
		got = append(got, string(r))
	}
	for _, w := range []GoneWhy{GoneExpired, GoneReleased, GoneStarted, GoneUnknown} {
		got = append(got, string(w))
	}
	want := []string{"memory", "disk", "cpus", "not_ready", "policy", "no_reservation", "invalid",
		"ceiling", "concurrency", "runner", "expired", "released", "started", "unknown"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("wire names (-want +got):\n%s", diff)
	}
}
