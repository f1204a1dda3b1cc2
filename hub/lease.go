package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/pgstore"
	"github.com/vk-ci/vk/internal/logkey"
)

// ErrLostLease is returned (joined with any shutdown error) by [Run] when
// the hub stopped because it lost the leader lease, so that the process
// exits non-zero and its supervisor starts it again as a standby.
var ErrLostLease = errors.New("hub: lost the leader lease")

// leasedStore is the PostgreSQL store of a hub that holds the leader
// lease (store.lease): every write is fenced with the lease's epoch, and
// closing the store first gives the lease up, so a waiting hub takes over
// at once.
type leasedStore struct {
	*pgstore.Store
	stop func() // ends Lease.Run, which releases the lease; idempotent
}

// Close implements [store.Store.Close].
func (l leasedStore) Close() error {
	l.stop()
	return l.Store.Close()
}

// openLeased opens the fenced store at dsn and blocks until this hub holds
// the leader lease (a second hub on the same database waits here, a cold
// standby) or ctx ends. lost is closed if the hub later stops holding the
// lease (a renew refused, or not renewed before its deadline): the hub
// must then stop, and its writes are already refused.
func openLeased(ctx context.Context, dsn string, cfg StoreConfig, log *slog.Logger) (st store.Store, pg *pgstore.Store, lost <-chan struct{}, err error) {
	pg, err = pgstore.Open(ctx, dsn, pgstore.Options{Fenced: true})
	if err != nil {
		return nil, nil, nil, err
	}
	holder := cfg.Instance
	if holder == "" {
		holder, _ = os.Hostname()
	}
	l := pgstore.NewLease(pg.Pool(), pgstore.LeaseConfig{Holder: holder, TTL: cfg.leaseTTL(), Log: log})
	elected := make(chan uint64, 1)
	lostCh := make(chan struct{})
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(lctx, func(leadCtx context.Context, epoch uint64) {
			pg.SetEpoch(epoch)
			elected <- epoch
			<-leadCtx.Done()
			if lctx.Err() == nil {
				close(lostCh)
				cancel() // contend no more: this process stops
			}
		})
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	log.Info("hub: waiting for the leader lease", "holder", holder, "ttl", l.TTL())
	select {
	case epoch := <-elected:
		log.Info("hub: holding the leader lease", "holder", holder, "epoch", epoch)
		return leasedStore{pg, stop}, pg, lostCh, nil
	case <-ctx.Done():
		stop()
		pg.Close()
		return nil, nil, nil, fmt.Errorf("hub: waiting for the leader lease: %w", ctx.Err())
	}
}

// watchLease stops the hub (as a failed listener does) when it loses the
// lease.
func (s *Server) watchLease(ctx context.Context, lost <-chan struct{}) {
	select {
	case <-lost:
		s.lostLease.Store(true)
		s.log.Error("hub: lost the leader lease; stopping (writes are refused from now on)", logkey.Err, pgstore.ErrFenced)
		s.fail()
	case <-ctx.Done():
	}
}

// fail ends Run's wait, once.
func (s *Server) fail() { s.failOnce.Do(func() { close(s.done) }) }

func (c StoreConfig) leaseTTL() time.Duration {
	if c.LeaseTTLMillis <= 0 {
		return pgstore.DefaultTTL
	}
	return time.Duration(c.LeaseTTLMillis) * time.Millisecond
}
