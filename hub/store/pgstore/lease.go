package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vk-ci/vk/internal/clock"
	"github.com/vk-ci/vk/internal/logkey"
)

// DefaultTTL is the leader lease's default lifetime.
const DefaultTTL = 5 * time.Second

// LeaseConfig configures a [Lease].
type LeaseConfig struct {
	// Holder names this hub instance in the lease row (logs, /healthz).
	// Required.
	Holder string
	// TTL is the lease's lifetime on the database's clock; 0 means
	// [DefaultTTL]. The holder renews every third of it.
	TTL time.Duration
	// Clock is the local clock, for the holder's own deadline and its
	// timers; nil means real time.
	Clock clock.Clock
	// OnChange, when set, is called from [Lease.Run] when this instance
	// starts leading (leading true) and when it stops (false), before the
	// leader's context is cancelled.
	OnChange func(epoch uint64, leading bool)
	// Log receives lease transitions; nil discards them.
	Log *slog.Logger
}

// Lease is the leader lease: one row (holder, epoch, expiry on the
// database's clock) that at most one hub instance holds at a time. A new
// holder gets the next epoch; the store fences writes with it
// ([Store.SetEpoch]).
//
// The holder's local deadline is measured from before the request that
// took or renewed the lease was sent, minus a tenth of the TTL for clock
// rate differences: the database set the expiry no earlier than it
// received the request, so the holder stops acting before the lease can
// have expired in the database, whatever the network did.
type Lease struct {
	pool *pgxpool.Pool
	cfg  LeaseConfig
	clk  clock.Clock
	log  *slog.Logger
	// until is the local deadline of the lease Run holds, nil while it
	// holds none: see [Lease.Held].
	until atomic.Pointer[time.Time]
}

// NewLease returns the lease on the database pool talks to (the lease row
// is made by the store's schema: open a [Store] on the database first).
func NewLease(pool *pgxpool.Pool, cfg LeaseConfig) *Lease {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Lease{pool: pool, cfg: cfg, clk: clock.Or(cfg.Clock), log: log.With(logkey.Component, "lease")}
}

// TTL is the lease's lifetime.
func (l *Lease) TTL() time.Duration { return l.cfg.TTL }

// Held reports whether the lease [Lease.Run] took is still this
// instance's by its local deadline, now. It reads the clock, not the
// renewing goroutine's verdict: a process that was paused (SIGSTOP, a
// long GC, a stalled VM) past its deadline sees false at once on waking,
// before that goroutine has run. A leader checks it before it answers
// what it read from its own memory, since a newer leader may have changed
// it since (docs/ha.md, "A paused leader answers nothing").
func (l *Lease) Held() bool {
	d := l.until.Load()
	return d != nil && l.clk.Now().Before(*d)
}

func (l *Lease) setUntil(d time.Time) {
	if d.IsZero() {
		l.until.Store(nil)
		return
	}
	l.until.Store(&d)
}

// margin is how much earlier than the TTL the holder gives up.
func (l *Lease) margin() time.Duration { return l.cfg.TTL / 10 }

// TryAcquire takes the lease if it has expired on the database's clock
// (or was released), with the next epoch. ok is false while another
// holder's lease is live. deadline is when the caller must stop acting
// unless it renews first.
func (l *Lease) TryAcquire(ctx context.Context) (epoch uint64, deadline time.Time, ok bool, err error) {
	sent := l.clk.Now()
	var e int64
	err = l.pool.QueryRow(ctx, `UPDATE vk_lease
		SET holder = $1, epoch = epoch + 1, expires = clock_timestamp() + make_interval(secs => $2)
		WHERE name = 'leader' AND expires <= clock_timestamp() RETURNING epoch`,
		l.cfg.Holder, l.cfg.TTL.Seconds()).Scan(&e)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, time.Time{}, false, nil
	}
	if err != nil {
		return 0, time.Time{}, false, fmt.Errorf("pgstore: lease: %w", err)
	}
	return uint64(e), sent.Add(l.cfg.TTL - l.margin()), true, nil
}

// Renew extends the lease held with epoch. ok is false if it is no longer
// this holder's (another took it after it expired): stop at once.
func (l *Lease) Renew(ctx context.Context, epoch uint64) (deadline time.Time, ok bool, err error) {
	sent := l.clk.Now()
	tag, err := l.pool.Exec(ctx, `UPDATE vk_lease SET expires = clock_timestamp() + make_interval(secs => $3)
		WHERE name = 'leader' AND holder = $1 AND epoch = $2`, l.cfg.Holder, int64(epoch), l.cfg.TTL.Seconds())
	if err != nil {
		return time.Time{}, false, fmt.Errorf("pgstore: lease renew: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return time.Time{}, false, nil
	}
	return sent.Add(l.cfg.TTL - l.margin()), true, nil
}

// Release ends the lease held with epoch at once, so another instance can
// take it without waiting for the expiry. Releasing a lease no longer
// held does nothing.
func (l *Lease) Release(ctx context.Context, epoch uint64) error {
	_, err := l.pool.Exec(ctx, `UPDATE vk_lease SET expires = '-infinity'
		WHERE name = 'leader' AND holder = $1 AND epoch = $2`, l.cfg.Holder, int64(epoch))
	if err != nil {
		return fmt.Errorf("pgstore: lease release: %w", err)
	}
	return nil
}

// Holder returns the lease row as the database has it: holder, epoch and
// whether it is live on the database's clock.
func (l *Lease) Holder(ctx context.Context) (holder string, epoch uint64, live bool, err error) {
	var e int64
	err = l.pool.QueryRow(ctx, "SELECT holder, epoch, expires > clock_timestamp() FROM vk_lease WHERE name = 'leader'").Scan(&holder, &e, &live)
	if err != nil {
		return "", 0, false, fmt.Errorf("pgstore: lease: %w", err)
	}
	return holder, uint64(e), live, nil
}

// Run contends for the lease until ctx ends. Each time this instance
// takes the lease it calls lead in a new goroutine with a context that is
// cancelled when it stops leading: the renew was refused, or its local
// deadline passed without a successful renew (the database unreachable).
// Run waits for lead to return before contending again. When ctx ends, a
// lease still held is released.
func (l *Lease) Run(ctx context.Context, lead func(ctx context.Context, epoch uint64)) {
	retry := l.cfg.TTL / 3
	for {
		epoch, deadline, err := l.acquire(ctx, retry)
		if err != nil {
			return // ctx ended
		}
		l.setUntil(deadline)
		l.log.Info("lease: leading", "epoch", epoch, "holder", l.cfg.Holder)
		if l.cfg.OnChange != nil {
			l.cfg.OnChange(epoch, true)
		}
		leadCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			lead(leadCtx, epoch)
		}()
		why := l.hold(ctx, epoch, deadline)
		l.setUntil(time.Time{})
		l.log.Warn("lease: stopped leading", "epoch", epoch, "why", why)
		if l.cfg.OnChange != nil {
			l.cfg.OnChange(epoch, false)
		}
		cancel()
		<-done
		if ctx.Err() != nil {
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.TTL/3)
			l.Release(rctx, epoch)
			rcancel()
			return
		}
	}
}

// acquire tries to take the lease every retry until it does or ctx ends.
func (l *Lease) acquire(ctx context.Context, retry time.Duration) (uint64, time.Time, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, retry)
		epoch, deadline, ok, err := l.TryAcquire(actx)
		cancel()
		if ok && l.clk.Now().Before(deadline) {
			return epoch, deadline, nil
		}
		if err != nil && ctx.Err() == nil {
			l.log.Debug("lease: acquire failed", logkey.Err, err)
		}
		if err := l.wait(ctx, retry); err != nil {
			return 0, time.Time{}, err
		}
	}
}

// hold renews the lease every third of the TTL until a renew is refused,
// the local deadline passes, or ctx ends; it says which.
func (l *Lease) hold(ctx context.Context, epoch uint64, deadline time.Time) string {
	every := l.cfg.TTL / 3
	next := l.clk.Now().Add(every)
	for {
		wake := next
		if deadline.Before(wake) {
			wake = deadline
		}
		if err := l.wait(ctx, wake.Sub(l.clk.Now())); err != nil {
			return "shutting down"
		}
		now := l.clk.Now()
		if !now.Before(deadline) {
			return "deadline passed without a renew"
		}
		rctx, cancel := context.WithTimeout(ctx, deadline.Sub(now))
		d, ok, err := l.Renew(rctx, epoch)
		cancel()
		switch {
		case err == nil && !ok:
			return "renew refused: another instance holds the lease"
		case err == nil:
			deadline, next = d, l.clk.Now().Add(every)
			l.setUntil(deadline)
		default:
			if ctx.Err() != nil {
				return "shutting down"
			}
			l.log.Warn("lease: renew failed", "epoch", epoch, logkey.Err, err)
			next = l.clk.Now().Add(every / 4) // retry soon, bounded by the deadline
		}
	}
}

// wait waits d on the local clock, or until ctx ends.
func (l *Lease) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := l.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
