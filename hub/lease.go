package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
)

// ErrLostLease is returned (joined with any shutdown error) by [Run] when
// the hub stopped because it lost the leader lease, so that the process
// exits non-zero and its supervisor starts it again as a standby.
var ErrLostLease = errors.New("hub: lost the leader lease")

// metaLeaderURL is the store meta key where the leader writes "<epoch>
// <advertised URL>" once it leads, for standbys to name it (a fenced
// write: only the lease's holder can make it).
const metaLeaderURL = "hub.leader_url"

// leaseRunner contends for the leader lease on the store's database
// (pgstore.Lease.Run) once started; stop ends it, releasing a held lease.
type leaseRunner struct {
	l       *pgstore.Lease
	pg      *pgstore.Store
	holder  string
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	started atomic.Bool
	once    sync.Once
}

func (r *leaseRunner) start(lead func(ctx context.Context, epoch uint64)) {
	r.started.Store(true)
	go func() {
		defer close(r.done)
		r.l.Run(r.ctx, func(ctx context.Context, epoch uint64) {
			r.pg.SetEpoch(epoch)
			lead(ctx, epoch)
		})
	}()
}

// stop ends the contention and waits for it; idempotent.
func (r *leaseRunner) stop() {
	r.once.Do(func() {
		r.cancel()
		if r.started.Load() {
			<-r.done
		}
	})
}

// leasedStore is the PostgreSQL store of a hub under store.lease: every
// write is fenced with the lease's epoch, and closing the store first
// gives the lease up, so a standby takes over at once.
type leasedStore struct {
	*pgstore.Store
	r *leaseRunner
}

// Close implements [store.Store.Close]. It logs how many writes the
// fence refused over the store's life (a deposed leader's, made after a
// newer epoch took the lease), so a stopped instance's log says it.
func (l leasedStore) Close() error {
	l.r.stop()
	l.r.log.Info("hub: store closed", "fenced_writes_refused", l.Store.Refused())
	return l.Store.Close()
}

// pgOf returns the PostgreSQL store under st, nil for another kind.
func pgOf(st store.Store) *pgstore.Store {
	switch s := st.(type) {
	case *pgstore.Store:
		return s
	case leasedStore:
		return s.Store
	}
	return nil
}

// openLeased opens the fenced store at dsn and its lease, not yet
// contending ([Server.contend] starts it).
func openLeased(ctx context.Context, dsn string, cfg StoreConfig, log *slog.Logger) (store.Store, *leaseRunner, error) {
	pg, err := pgstore.Open(ctx, idleTxTimeout(dsn, cfg.leaseTTL()/3), pgstore.Options{Fenced: true})
	if err != nil {
		return nil, nil, err
	}
	holder := cfg.Instance
	if holder == "" {
		holder, _ = os.Hostname()
	}
	r := &leaseRunner{pg: pg, holder: holder, log: log, done: make(chan struct{}),
		l: pgstore.NewLease(pg.Pool(), pgstore.LeaseConfig{Holder: holder, TTL: cfg.leaseTTL(), Log: log})}
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return leasedStore{pg, r}, r, nil
}

// idleTxTimeout sets the sessions' idle_in_transaction_session_timeout
// on dsn (a key=value string or a URL). A fenced write holds the lease
// row FOR SHARE until it commits, and a new holder's UPDATE waits for it:
// without the timeout, a leader that died mid-transaction (its machine
// gone, no FIN) would hold the takeover back until the database's TCP
// keepalive noticed, hours by default. With it the database ends such a
// transaction a third of a TTL after its last statement (docs/ha.md).
func idleTxTimeout(dsn string, d time.Duration) string {
	ms := strconv.FormatInt(max(d.Milliseconds(), 1), 10)
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + "idle_in_transaction_session_timeout=" + ms
	}
	return dsn + " idle_in_transaction_session_timeout=" + ms
}

// contend leads at once without a lease; with one it starts contending
// and the hub serves as a standby until it holds the lease. A leader
// that loses the lease stops the hub (its writes are already refused).
func (s *Server) contend(context.Context) error {
	if s.lease == nil {
		return s.lead(0)
	}
	s.log.Info("hub: standby, contending for the leader lease", "holder", s.lease.holder, "ttl", s.lease.l.TTL())
	s.lease.start(func(leadCtx context.Context, epoch uint64) {
		t0 := time.Now()
		if err := s.lead(epoch); err != nil {
			if !errors.Is(err, errStopped) {
				s.log.Error("hub: taking over as leader failed; stopping", "epoch", epoch, logkey.Err, err)
				s.fail()
			}
			s.lease.cancel() // contend no more: this process stops
			return
		}
		s.log.Info("hub: leading", "holder", s.lease.holder, "epoch", epoch, "nodes", s.router.count(),
			"took", time.Since(t0).Round(time.Millisecond))
		<-leadCtx.Done()
		if s.lease.ctx.Err() == nil {
			s.lostLease.Store(true)
			s.met.set("vk_hub_leader", 0)
			s.log.Error("hub: lost the leader lease; stopping (writes are refused from now on)", "epoch", epoch, logkey.Err, pgstore.ErrFenced)
			s.fail()
			s.lease.cancel()
		}
	})
	return nil
}

// haMetrics registers the metrics of leadership.
func haMetrics(m *metrics) *metrics {
	m.gauge("vk_hub_leader", "1 while this instance leads (holds the leader lease, or runs without one), 0 while a standby.")
	m.gauge("vk_hub_lease_epoch", "The lease epoch this instance leads at (0 without a lease or while a standby).")
	m.counter("vk_hub_standby_reports_total", "Node reports and heartbeats a standby ingested into its fleet picture.")
	m.counter("vk_hub_promotions_total", "Times this instance took over as leader from standby.")
	return m
}

// advertise writes this leader's URL for the standbys to name.
func (s *Server) advertise(epoch uint64) error {
	u := s.cfg.Store.AdvertiseURL
	if u == "" {
		u = s.URL()
	}
	if err := s.st.PutMeta(s.runCtx, metaLeaderURL, []byte(strconv.FormatUint(epoch, 10)+" "+u)); err != nil {
		return fmt.Errorf("hub: advertise the leader's URL: %w", err)
	}
	return nil
}

// leaderCache keeps a standby's view of the leader for a quarter second,
// so a burst of redirected requests reads the database once.
type leaderCache struct {
	mu    sync.Mutex
	at    time.Time
	url   string
	epoch uint64
}

// currentLeader returns the live leader's advertised URL and the lease's
// epoch as the database has them; url is "" while no live leader has
// advertised itself (between a leader's loss and the next one's start).
func (s *Server) currentLeader(ctx context.Context) (url string, epoch uint64) {
	if s.lease == nil {
		return "", 0
	}
	c := &s.leaderURL
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < 250*time.Millisecond {
		return c.url, c.epoch
	}
	c.at, c.url = time.Now(), ""
	_, e, live, err := s.lease.l.Holder(ctx)
	if err != nil {
		return "", c.epoch
	}
	c.epoch = e
	if !live {
		return "", e
	}
	b, err := s.st.GetMeta(ctx, metaLeaderURL)
	if err != nil {
		return "", e
	}
	es, u, _ := strings.Cut(string(b), " ")
	if es == strconv.FormatUint(e, 10) {
		c.url = u
	}
	return c.url, e
}

// serveStandby answers what only the leader serves (client API, relay
// sessions, enrolment): 503 unavailable naming the leader, to which the
// client sends the request itself (its signature binds to its own TLS
// connection, so nothing is proxied).
func (s *Server) serveStandby(w http.ResponseWriter, r *http.Request) {
	u, _ := s.currentLeader(r.Context())
	writeUnavailable(w, "this hub instance is a standby: send requests to the leader", u)
}

// writeUnavailable answers 503 unavailable, retry in a second, naming the
// leader when it is known.
func writeUnavailable(w http.ResponseWriter, msg, leader string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	json.NewEncoder(w).Encode(client.Error{Error: msg, Code: client.CodeUnavailable, RetryAfterSecs: 1, Leader: leader})
}

// Health is the body of GET /healthz.
type Health struct {
	// Status is always "ok": the instance serves.
	Status string `json:"status"`
	// Role is "leader" or "standby".
	Role string `json:"role"`
	// Epoch is the leader lease epoch: the one this instance leads at, or
	// for a standby the newest the database holds (0 without a lease).
	Epoch uint64 `json:"epoch"`
	// Leader is the leader's advertised URL as a standby knows it; empty
	// for a leader and while no live leader advertised itself.
	Leader string `json:"leader,omitempty"`
	// Nodes counts the node sessions this instance holds.
	Nodes int `json:"nodes"`
}

func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	h := Health{Status: "ok", Role: "leader", Epoch: s.Epoch(), Nodes: s.router.count()}
	if !s.isLeading() {
		h.Role = "standby"
		h.Leader, h.Epoch = s.currentLeader(r.Context())
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(h)
}

// fail ends Run's wait, once.
func (s *Server) fail() { s.failOnce.Do(func() { close(s.done) }) }

func (c StoreConfig) leaseTTL() time.Duration {
	if c.LeaseTTLMillis <= 0 {
		return pgstore.DefaultTTL
	}
	return time.Duration(c.LeaseTTLMillis) * time.Millisecond
}
