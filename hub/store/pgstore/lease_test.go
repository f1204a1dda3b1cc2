package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/hub/store/storetest"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/pgtest"
	"github.com/vk-ci/vk/internal/testlog"
)

// contender is one hub instance contending for the lease through its own
// proxy to the database, with its own fenced store.
type contender struct {
	name  string
	proxy *pgtest.Proxy
	st    *pgstore.Store
	lease *pgstore.Lease
	wrote int // writes that succeeded while leading; guarded by events.mu
}

// events records lease transitions of all contenders in order and checks
// that at most one leads at any moment.
type events struct {
	mu      sync.Mutex
	leader  string // "" while none
	log     []string
	changed chan struct{} // signalled on every transition
	bad     []string
}

func (ev *events) on(name string) func(uint64, bool) {
	return func(epoch uint64, leading bool) {
		ev.mu.Lock()
		defer ev.mu.Unlock()
		ev.log = append(ev.log, fmt.Sprintf("%s %v epoch %d", name, leading, epoch))
		switch {
		case leading && ev.leader != "":
			ev.bad = append(ev.bad, fmt.Sprintf("%s leads at epoch %d while %s still does", name, epoch, ev.leader))
		case leading:
			ev.leader = name
		case ev.leader == name:
			ev.leader = ""
		}
		select {
		case ev.changed <- struct{}{}:
		default:
		}
	}
}

// waitFor waits until cond holds (checked on every transition and every
// renew period), or fails t after limit.
func (ev *events) waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(limit)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ev.mu.Lock()
		ok := cond()
		ev.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ev.changed:
		case <-tick.C:
		case <-deadline:
			ev.mu.Lock()
			defer ev.mu.Unlock()
			t.Fatalf("%s: not within %v; transitions: %v", what, limit, ev.log)
		}
	}
}

func newContender(t *testing.T, srv *pgtest.Server, dsnTail, name string, ttl time.Duration, ev *events) *contender {
	t.Helper()
	p := pgtest.NewProxy(t, srv.Addr())
	dsn := pgtest.DSNAt(p.Addr(), "postgres") + dsnTail
	st, err := pgstore.Open(t.Context(), dsn, pgstore.Options{Fenced: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &contender{name: name, proxy: p, st: st}
	c.lease = pgstore.NewLease(st.Pool(), pgstore.LeaseConfig{Holder: name, TTL: ttl, OnChange: ev.on(name), Log: testlog.New(t)})
	return c
}

// run contends until the test ends; while leading it writes an audit
// entry every few milliseconds with its epoch.
func (c *contender) run(t *testing.T, ev *events) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.lease.Run(ctx, func(ctx context.Context, epoch uint64) {
			c.st.SetEpoch(epoch)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				_, err := c.st.AppendAudit(ctx, store.AuditEntry{Time: time.Now(), Actor: c.name, Action: "tick", Detail: fmt.Sprint(epoch)})
				if err == nil {
					ev.mu.Lock()
					c.wrote++
					ev.mu.Unlock()
				}
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// tail makes a new schema and returns the DSN's part naming it, for
// contenders that reach the cluster through their own proxies.
func tail(srv *pgtest.Server, t *testing.T) string {
	_, path, _ := strings.Cut(srv.NewSchema(t), " search_path=")
	return " search_path=" + path
}

// spec: BS-10, BS-11
// Two contenders: one leads at a time. The leader cut off from the
// database (a black hole) stops leading before its lease can have expired;
// the other then takes the lease with the next epoch. The deposed leader,
// reconnected and still holding its old epoch, has every write refused,
// and the refusals are counted.
func TestLeaseFailoverFencesDeposed(t *testing.T) {
	srv := pgtest.Start(t)
	ttl := 2 * time.Second
	ev := &events{changed: make(chan struct{}, 1)}
	path := tail(srv, t)
	a := newContender(t, srv, path, "hub-a", ttl, ev)
	b := newContender(t, srv, path, "hub-b", ttl, ev)
	a.run(t, ev)
	ev.waitFor(t, 10*time.Second, "hub-a leading and writing", func() bool { return ev.leader == "hub-a" && a.wrote > 0 })
	b.run(t, ev)

	_, epoch1, _, err := b.lease.Holder(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cutAt := time.Now()
	a.proxy.Blackhole(true)
	ev.waitFor(t, 4*ttl, "hub-b leading after hub-a was cut off", func() bool { return ev.leader == "hub-b" })
	t.Logf("failover after the black hole: %v (ttl %v)", time.Since(cutAt).Round(time.Millisecond), ttl)
	holder, epoch2, live, err := b.lease.Holder(t.Context())
	if err != nil || holder != "hub-b" || !live || epoch2 != epoch1+1 {
		t.Fatalf("lease after failover: %s epoch %d live %v (%v), want hub-b epoch %d live", holder, epoch2, live, err, epoch1+1)
	}
	ev.waitFor(t, 10*time.Second, "hub-b writing", func() bool { return b.wrote > 0 })

	a.proxy.Blackhole(false)
	before := a.st.Refused()
	a.st.SetEpoch(epoch1) // what the deposed leader still believes
	const tries = 5
	for i := range tries {
		_, err := a.st.AppendAudit(t.Context(), store.AuditEntry{Time: time.Now(), Actor: "hub-a", Action: "late", Detail: fmt.Sprint(i)})
		if !errors.Is(err, pgstore.ErrFenced) {
			t.Fatalf("deposed leader's write %d: %v, want ErrFenced", i, err)
		}
	}
	if err := a.st.PutMeta(t.Context(), "k", []byte("v")); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("deposed leader's PutMeta: %v, want ErrFenced", err)
	}
	if got := a.st.Refused() - before; got != tries+1 {
		t.Fatalf("refused writes counted %d, want %d", got, tries+1)
	}
	// Nothing the deposed leader tried is in the store.
	es, err := b.st.ListAudit(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Action == "late" || e.Actor == "hub-a" && e.Detail != fmt.Sprint(epoch1) {
			t.Fatalf("a write of the deposed leader reached the store: %+v", e)
		}
	}
	if _, err := b.st.GetMeta(t.Context(), "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deposed leader's PutMeta reached the store: %v", err)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if len(ev.bad) > 0 {
		t.Fatalf("two leaders at once: %v\ntransitions: %v", ev.bad, ev.log)
	}
}

// spec: BS-10
// The lease expires on the database's clock: while the holder's lease is
// live another instance cannot take it; once the database says it
// expired, the next taker gets the next epoch; a release hands it over at
// once; an unfenced writer's epoch 0 is refused by a fenced store.
func TestLeaseExpiryOnDatabaseClock(t *testing.T) {
	srv := pgtest.Start(t)
	dsn := srv.NewSchema(t)
	st, err := pgstore.Open(t.Context(), dsn, pgstore.Options{Fenced: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.PutMeta(t.Context(), "k", nil); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("write before any epoch: %v, want ErrFenced", err)
	}
	ttl := time.Second
	a := pgstore.NewLease(st.Pool(), pgstore.LeaseConfig{Holder: "a", TTL: ttl})
	b := pgstore.NewLease(st.Pool(), pgstore.LeaseConfig{Holder: "b", TTL: ttl})
	sent := time.Now()
	e1, deadline, ok, err := a.TryAcquire(t.Context())
	if err != nil || !ok {
		t.Fatalf("a: TryAcquire: %v %v", ok, err)
	}
	if max := sent.Add(ttl); deadline.After(max) || !deadline.After(sent) {
		t.Fatalf("local deadline %v not within (sent, sent+ttl]", deadline.Sub(sent))
	}
	if _, _, ok, err := b.TryAcquire(t.Context()); err != nil || ok {
		t.Fatalf("b took a live lease: %v %v", ok, err)
	}
	// Wait for the database to call the lease expired.
	for {
		_, _, live, err := b.Holder(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !live {
			break
		}
		if time.Since(sent) > 10*ttl {
			t.Fatal("lease still live after 10 TTLs")
		}
		time.Sleep(ttl / 20) // polling the database's view, not standing in for it
	}
	e2, _, ok, err := b.TryAcquire(t.Context())
	if err != nil || !ok || e2 != e1+1 {
		t.Fatalf("b after expiry: epoch %d ok %v (%v), want %d", e2, ok, err, e1+1)
	}
	if _, ok, err := a.Renew(t.Context(), e1); err != nil || ok {
		t.Fatalf("a renewed a lease b took: %v %v", ok, err)
	}
	if err := b.Release(t.Context(), e2); err != nil {
		t.Fatal(err)
	}
	e3, _, ok, err := a.TryAcquire(t.Context())
	if err != nil || !ok || e3 != e2+1 {
		t.Fatalf("a after b released: epoch %d ok %v (%v), want %d", e3, ok, err, e2+1)
	}
	st.SetEpoch(e3)
	if err := st.PutMeta(t.Context(), "k", nil); err != nil {
		t.Fatalf("write with the current epoch: %v", err)
	}
	st.SetEpoch(e2)
	if err := st.PutMeta(t.Context(), "k", nil); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("write with an old epoch: %v, want ErrFenced", err)
	}
}

// spec: BS-10
// The leader keeps its lease across cut connections (the pool dials
// again, the renew succeeds within the TTL, same epoch, no stop) and
// leads again after the database server restarts, its writes accepted.
func TestLeaseSurvivesCutAndRestart(t *testing.T) {
	srv := pgtest.Start(t)
	ttl := 3 * time.Second
	ev := &events{changed: make(chan struct{}, 1)}
	a := newContender(t, srv, tail(srv, t), "hub-a", ttl, ev)
	a.run(t, ev)
	ev.waitFor(t, 10*time.Second, "hub-a leading", func() bool { return ev.leader == "hub-a" && a.wrote > 0 })
	_, epoch, _, err := a.lease.Holder(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		a.proxy.Cut()
		ev.mu.Lock()
		w := a.wrote
		ev.mu.Unlock()
		ev.waitFor(t, 2*ttl, "writes after a cut", func() bool { return a.wrote > w+3 })
	}
	ev.mu.Lock()
	if n := len(ev.log); n != 1 {
		t.Fatalf("cut connections changed leadership: %v", ev.log)
	}
	ev.mu.Unlock()
	if _, e, live, err := a.lease.Holder(t.Context()); err != nil || e != epoch || !live {
		t.Fatalf("after cuts: epoch %d live %v (%v), want %d live", e, live, err, epoch)
	}

	srv.Restart(t)
	ev.mu.Lock()
	w := a.wrote
	ev.mu.Unlock()
	ev.waitFor(t, 4*ttl, "leading and writing after a restart", func() bool { return ev.leader == "hub-a" && a.wrote > w+3 })
	ev.mu.Lock()
	t.Logf("transitions across the restart: %v", ev.log)
	ev.mu.Unlock()
}

// spec: BS-10, API-42
// A job created with its request_id answer is fenced as every write is:
// with an old epoch neither the job nor its answer reaches the store;
// with the lease's own epoch both do.
func TestCreateJobAnsweredFenced(t *testing.T) {
	srv := pgtest.Start(t)
	st, err := pgstore.Open(t.Context(), srv.NewSchema(t), pgstore.Options{Fenced: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := pgstore.NewLease(st.Pool(), pgstore.LeaseConfig{Holder: "a", TTL: time.Minute})
	e1, _, ok, err := l.TryAcquire(t.Context())
	if err != nil || !ok {
		t.Fatalf("TryAcquire: %v %v", ok, err)
	}
	j := storetest.FullJob("job-1")
	a := store.Answer{Principal: "relay-1", RequestID: j.RequestID, Status: 201, Body: []byte("{}\n"), Job: j.ID, Created: storetest.T0}
	st.SetEpoch(e1 - 1)
	if err := st.CreateJobAnswered(t.Context(), j, a); !errors.Is(err, pgstore.ErrFenced) {
		t.Fatalf("CreateJobAnswered with an old epoch: %v, want ErrFenced", err)
	}
	if _, err := st.GetJob(t.Context(), j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the fenced create's job: %v, want not found", err)
	}
	if _, err := st.GetAnswer(t.Context(), a.Principal, a.RequestID, storetest.T0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the fenced create's answer: %v, want not found", err)
	}
	st.SetEpoch(e1)
	if err := st.CreateJobAnswered(t.Context(), j, a); err != nil {
		t.Fatalf("CreateJobAnswered with the lease's epoch: %v", err)
	}
	if _, err := st.GetAnswer(t.Context(), a.Principal, a.RequestID, storetest.T0); err != nil {
		t.Fatalf("the leader's answer: %v", err)
	}
}

// A leader must not answer from its memory once its lease may have
// expired, and a paused process learns that late: its renewing goroutine
// runs only after it wakes. Held reads the local clock against the
// deadline instead, so it is false the moment the deadline has passed,
// before the lease's own goroutine has noticed (here the fake clock jumps
// past it, as the real one does across a SIGSTOP), and false before the
// lease was ever taken.
//
// spec: BS-10, BS-11
func TestLeaseHeldEndsAtLocalDeadline(t *testing.T) {
	srv := pgtest.Start(t)
	st, err := pgstore.Open(t.Context(), srv.NewSchema(t), pgstore.Options{Fenced: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clk := clock.NewFake(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	ttl := 5 * time.Second
	l := pgstore.NewLease(st.Pool(), pgstore.LeaseConfig{Holder: "a", TTL: ttl, Clock: clk})
	if l.Held() {
		t.Fatal("held before Run took the lease")
	}
	leading := make(chan uint64, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx, func(lctx context.Context, epoch uint64) {
			leading <- epoch
			<-lctx.Done()
		})
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("never took the lease")
	}
	if !l.Held() {
		t.Fatal("not held right after taking the lease")
	}
	clk.Advance(ttl) // past the local deadline (TTL less a tenth)
	if l.Held() {
		t.Fatal("still held with the clock past the local deadline")
	}
}
