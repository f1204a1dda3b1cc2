package hub

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/api"
	"github.com/vk-ci/vk/hub/enrol"
	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/session"
	"github.com/vk-ci/vk/internal/connlimit"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
)

// lead makes this instance the acting hub at epoch (0 without a lease):
// it restores state from the store as a restart does (DECISIONS 6),
// starts the driver, serves the client API, relay sessions, enrolment,
// the admin socket and the UI, and hands the node sessions it already
// holds to the driver (BS-14, BS-15). It runs once per process.
func (s *Server) lead(epoch uint64) error {
	s.leadMu.Lock()
	defer s.leadMu.Unlock()
	if s.stopping {
		return errStopped
	}
	s.metMu.Lock()
	drv, err := newDriver(s.runCtx, s.cfg, s.pol, s.st, s.out, s.clk, s.log, s.met)
	s.metMu.Unlock()
	if err != nil {
		return err
	}
	s.drv = drv
	drv.beforeStart = s.opt.BeforeStart
	drv.tokens = s.tokens
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		drv.Run(s.runCtx)
	}()
	go func() {
		defer s.wg.Done()
		s.pruneAnswers(s.runCtx, s.clk)
	}()
	mux, err := s.leaderRoutes(drv)
	if err != nil {
		return err
	}
	if err := s.startUI(drv); err != nil {
		return err
	}
	if s.lease != nil {
		if err := s.advertise(epoch); err != nil {
			return err
		}
	}
	s.epoch.Store(epoch)
	s.leaderMux.Store(mux)
	s.router.promote(drv, epoch)
	if s.lease != nil {
		s.met.add("vk_hub_promotions_total", 1)
	}
	s.met.set("vk_hub_leader", 1)
	s.met.set("vk_hub_lease_epoch", float64(epoch))
	close(s.leading)
	return nil
}

// leaderRoutes builds the leader's mux (client API, relay sessions,
// enrolment) and starts the admin socket.
func (s *Server) leaderRoutes(drv *Driver) (*http.ServeMux, error) {
	mux := http.NewServeMux()
	s.everyInstance(mux)
	upd := relayUpdates{rs: newReleaseStore(s.cfg.StateDir, s.st, s.clk), d: drv}
	api.New(api.Config{Backend: drv, Store: s.st, Output: s.out, Clock: s.clk, Log: s.log, Skew: s.cfg.skew(),
		MaxBody: s.cfg.Limits.MaxBodyBytes, BodyPerMiB: s.cfg.Limits.bodyPerMiB(), Budget: s.budget, Observe: s.met.observe,
		Releases: upd}).Register(mux)
	s.relays = session.NewRelayServer(s.scfg, sessionHandler{d: drv, ctx: s.runCtx})
	mux.Handle(client.RouteRelaySession, s.relays)
	enr, err := enrol.New(enrol.Config{Store: s.st, CAPEM: s.caPEM, Clock: s.clk, Log: s.log, BodyTimeout: s.cfg.Limits.bodyPerMiB(), Budget: s.budget})
	if err != nil {
		return nil, fmt.Errorf("hub: enrolment: %w", err)
	}
	enr.Register(mux) // the join route (AUTH-08)
	adm, err := admin.NewServer(admin.Config{Store: s.st, Backend: drv, Enroller: enr, CAFingerprint: pki.Fingerprint(caDER(s.caPEM)), Clock: s.clk, Log: s.log, Releases: upd})
	if err != nil {
		return nil, fmt.Errorf("hub: admin socket: %w", err)
	}
	admLn, err := adm.Listen(admin.SocketPath(s.cfg.StateDir))
	if err != nil {
		return nil, err
	}
	s.wg.Add(1) // ServeOn closes admLn when the hub's context ends
	go func() {
		defer s.wg.Done()
		if err := adm.ServeOn(s.runCtx, admLn); err != nil {
			s.log.Error("admin socket stopped", logkey.Err, err)
		}
	}()
	return mux, nil
}

// startUI serves the web UI when [ui] addr is set; its cleanup shuts it
// down.
func (s *Server) startUI(drv *Driver) error {
	uiLn, uiSrv, err := startUI(s.runCtx, s.cfg, s.st, drv, s.clk, s.log, s.tcfg)
	if err != nil || uiLn == nil {
		return err
	}
	if s.cfg.UIURL == "" {
		// approval_url links (API-56) point at the UI just bound.
		drv.cfg.UIURL = "https://" + uiLn.Addr().String()
	}
	s.uiLn, s.uiHTTP = uiLn, uiSrv
	s.uiLimit = connlimit.NewListener(uiLn, s.cfg.UI.connLimits())
	uiSrv.BaseContext = func(net.Listener) context.Context { return s.runCtx }
	s.cleanups = append(s.cleanups, func(ctx context.Context) error {
		if err := uiSrv.Shutdown(ctx); err != nil {
			uiSrv.Close()
		}
		return nil
	})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := uiSrv.Serve(tls.NewListener(s.uiLimit, s.tcfg))
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("web UI stopped", logkey.Err, err)
		}
	}()
	s.log.Info("web UI listening", "addr", uiLn.Addr().String(), "url", drv.cfg.UIURL, "basic_auth", s.cfg.UI.Token != "")
	return nil
}

// Leading is closed once this instance leads: at once without a lease,
// when it takes the lease with one.
func (s *Server) Leading() <-chan struct{} { return s.leading }

// Epoch returns the lease epoch this instance leads at: 0 while a
// standby, and without a lease.
func (s *Server) Epoch() uint64 { return s.epoch.Load() }

func (s *Server) isLeading() bool {
	select {
	case <-s.leading:
		return true
	default:
		return false
	}
}
