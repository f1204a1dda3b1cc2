package ledger

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

type op struct {
	Kind  int
	N     int // reservation or job index
	M     int // second index (reservation named by a start)
	Env   Envelope
	Lease int
	Adv   time.Duration
}

func drawOp(t *rapid.T) op {
	return op{
		Kind: rapid.IntRange(0, 11).Draw(t, "kind"),
		N:    rapid.IntRange(0, 12).Draw(t, "n"),
		M:    rapid.IntRange(-1, 12).Draw(t, "m"),
		Env: Envelope{
			MemBytes:  rapid.Int64Range(0, 8).Draw(t, "mem"),
			DiskBytes: rapid.Int64Range(0, 8).Draw(t, "disk"),
			CPUs:      rapid.Int64Range(0, 4).Draw(t, "cpus"),
		},
		Lease: rapid.IntRange(-1, 900).Draw(t, "lease"),
		Adv:   time.Duration(rapid.IntRange(0, 400).Draw(t, "adv")) * time.Second,
	}
}

// run applies op to l at *now and returns a transcript line; ended receives
// every reservation reported gone by the call.
func run(l *Ledger, now *time.Duration, o op, ended func(id string, why GoneWhy)) string {
	rid := fmt.Sprintf("r%d", o.N)
	jid := fmt.Sprintf("j%d", o.N)
	switch o.Kind {
	case 0, 1:
		return fmt.Sprintf("offer %s %+v", rid, l.Offer(*now, rid, o.Env, o.Lease))
	case 2:
		_, was := l.res[rid]
		s := l.Renew(*now, rid, o.Lease)
		if was && !s.Held {
			ended(rid, s.Why)
		}
		return fmt.Sprintf("renew %s %+v", rid, s)
	case 3:
		_, held := l.res[rid]
		s := l.Release(rid)
		if held {
			ended(rid, s.Why)
		}
		return fmt.Sprintf("release %s %+v", rid, s)
	case 4:
		*now += o.Adv
		ids := l.Expire(*now)
		for _, id := range ids {
			ended(id, GoneExpired)
		}
		return fmt.Sprintf("expire %v %v", *now, ids)
	case 5, 6:
		res := ""
		if o.M >= 0 {
			res = fmt.Sprintf("r%d", o.M)
		}
		r := l.Start(*now, jid, res, o.Env)
		if r.Converted {
			ended(res, GoneStarted)
		}
		return fmt.Sprintf("start %s %s %+v", jid, res, r)
	case 7:
		f, w, err := l.Resize(jid, o.Env)
		return fmt.Sprintf("resize %s %+v %v %v", jid, f, w, err)
	case 8:
		return fmt.Sprintf("finish %s %v", jid, l.Finish(jid))
	case 9:
		s := []State{StateReady, StateReady, StateDraining, StateQuarantined, StateMaintenance}[o.N%5]
		ids := l.SetState(s)
		for _, id := range ids {
			ended(id, GoneReleased)
		}
		return fmt.Sprintf("state %s %v", s, ids)
	case 10:
		switch o.M % 3 {
		case 0:
			l.SetCeiling(o.N)
		case 1:
			l.ClearCeiling()
		default:
			l.SetMaxConcurrency(o.N)
		}
		return fmt.Sprintf("limits %d %d", o.M, o.N)
	default:
		l.SetRunner(o.M%4 == 0)
		return fmt.Sprintf("runner %v", o.M%4 == 0)
	}
}

// spec: NODE-01, NODE-02, NODE-03, NODE-04, NODE-07, NODE-09, PLACE-06, ARB-30
func TestPropertyLedger(t *testing.T) {
	seen := map[string]int{} // how often the generator reached each outcome
	defer func() {
		for _, k := range []string{"Accepted:true", "Converted:true", "Reason:memory", "Reason:ceiling", "true <nil>", "expire"} {
			if seen[k] == 0 {
				t.Errorf("generator never produced %q: %v", k, seen)
			}
		}
		t.Logf("outcomes: %v", seen)
	}()
	rapid.Check(t, func(t *rapid.T) {
		total := Envelope{MemBytes: 16, DiskBytes: 16, CPUs: 8}
		l := New(Capacity{Total: total})
		ops := rapid.SliceOfN(rapid.Custom(drawOp), 30, 300).Draw(t, "ops")
		var now time.Duration
		held := map[string]bool{}  // reservations the model believes held
		endedN := map[string]int{} // times each reservation was reported ended
		var log []string
		for _, o := range ops {
			before := l.count()
			line := run(l, &now, o, func(id string, why GoneWhy) {
				if !held[id] {
					t.Fatalf("%s reported %s but was not held", id, why)
				}
				delete(held, id)
				endedN[id]++
			})
			log = append(log, line)
			for _, k := range []string{"Accepted:true", "Converted:true", "Reason:memory", "Reason:ceiling", "true <nil>"} {
				if strings.Contains(line, k) {
					seen[k]++
				}
			}
			if strings.HasPrefix(line, "expire") && !strings.HasSuffix(line, "[]") {
				seen["expire"]++
			}
			if strings.HasPrefix(line, "offer") && strings.Contains(line, "Accepted:true") {
				held[fmt.Sprintf("r%d", o.N)] = true
			}
			// Capacity never exceeded; used equals its entries.
			var sum Envelope
			for _, r := range l.res {
				sum = sum.add(r.env)
			}
			for _, j := range l.jobs {
				sum = sum.add(j.granted)
				if !j.granted.LessEq(j.want) && j.waiting {
					t.Fatalf("waiting job holds more than it wants: %+v", j)
				}
			}
			if sum != l.used {
				t.Fatalf("used %+v != sum of entries %+v after %s", l.used, sum, line)
			}
			if !l.used.LessEq(total) || !(Envelope{}).LessEq(l.used) {
				t.Fatalf("used %+v outside [0, %+v] after %s", l.used, total, line)
			}
			// The cap: an entry added never takes the count past it.
			if c := l.Cap(); l.count() > before && c >= 0 && l.count() > c {
				t.Fatalf("count %d > cap %d after %s", l.count(), c, line)
			}
			// Every reservation the ledger holds is one the model holds.
			for id := range l.res {
				if !held[id] {
					t.Fatalf("ledger holds %s the model does not", id)
				}
			}
		}
		// At the end every lease lapses: each reservation ended exactly once.
		now += 10 * MaxLeaseSecs * time.Second
		for _, id := range l.Expire(now) {
			delete(held, id)
			endedN[id]++
		}
		if len(held) != 0 {
			t.Fatalf("reservations never ended: %v", held)
		}
		for id, n := range endedN {
			if n != 1 {
				t.Fatalf("%s ended %d times", id, n)
			}
		}
		// Deterministic: the same calls on a fresh ledger give the same answers.
		l2 := New(Capacity{Total: total})
		var now2 time.Duration
		for i, o := range ops {
			if got := run(l2, &now2, o, func(string, GoneWhy) {}); got != log[i] {
				t.Fatalf("replay step %d = %q, want %q", i, got, log[i])
			}
		}
	})
}
