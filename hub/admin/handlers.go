package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vk-ci/vk/hub/api"

	"github.com/vk-ci/vk/hub/enrol"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/logkey"
)

// The admin socket's route handlers, one per route of [Server]; each
// answers JSON and audits what it changes.

// createToken serves POST /admin/tokens: mint a one-time enrolment token.
func (s *Server) createToken(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req TokenRequest
	if err := decode(body, &req); err != nil {
		return err
	}
	kind, err := enrol.ParseKind(req.Kind)
	if err != nil {
		return err
	}
	if req.TTLSecs < 0 {
		return fmt.Errorf("%w: ttl_secs %d", ErrInvalid, req.TTLSecs)
	}
	tok, err := s.cfg.Enroller.NewToken(r.Context(), kind, time.Duration(req.TTLSecs)*time.Second, actor(r))
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusCreated, TokenAnswer{Token: tok.Text, Kind: string(tok.Kind), Expires: tok.Expires, CAFingerprint: s.cfg.CAFingerprint})
	return nil
}

// listRelays serves GET /admin/relays: enrolled relays, removed included.
func (s *Server) listRelays(w http.ResponseWriter, r *http.Request, _ []byte) error {
	ps, err := s.cfg.Store.ListPrincipals(r.Context())
	if err != nil {
		return err
	}
	out := []Relay{}
	for _, p := range ps {
		if p.Kind == store.KindRelay {
			out = append(out, Relay{ID: p.ID, Name: p.Name, Created: p.Created, Removed: p.Removed, RemovedAt: p.RemovedAt})
		}
	}
	if err := s.relayReleases(r.Context(), out); err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

// removeRelay serves DELETE /admin/relays/{id} and removeNode DELETE
// /admin/nodes/{id}: each marks its principal removed (its key is refused
// from now on), audits, and tells the hub. Idempotent.
func (s *Server) removeRelay(w http.ResponseWriter, r *http.Request, _ []byte) error {
	return s.removePrincipal(w, r, store.KindRelay, "relay", logkey.RelayID, s.cfg.Backend.RelayRemoved)
}

func (s *Server) removeNode(w http.ResponseWriter, r *http.Request, _ []byte) error {
	return s.removePrincipal(w, r, store.KindNode, "node", logkey.NodeID, s.cfg.Backend.NodeRemoved)
}

func (s *Server) removePrincipal(w http.ResponseWriter, r *http.Request, kind store.PrincipalKind, what, logKey string,
	tell func(ctx context.Context, id string) error) error {
	id := r.PathValue("id")
	ctx := r.Context()
	p, err := s.cfg.Store.GetPrincipal(ctx, id)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, id, err)
	}
	if p.Kind != kind {
		return fmt.Errorf("%w: %q is a %s, not a %s", ErrNotFound, id, p.Kind, what)
	}
	if !p.Removed {
		if err := s.cfg.Store.RemovePrincipal(ctx, id, s.clk.Now().UTC()); err != nil {
			return err
		}
		if err := s.audit(ctx, r, what+".remove", id, ""); err != nil {
			return err
		}
		s.log.InfoContext(ctx, what+" removed", logKey, id, "actor", actor(r))
	}
	return noContent(w, tell(ctx, id))
}

// listNodes serves GET /admin/nodes, sorted by ID.
func (s *Server) listNodes(w http.ResponseWriter, r *http.Request, _ []byte) error {
	ns, err := s.cfg.Backend.Nodes(r.Context())
	if err != nil {
		return err
	}
	slices.SortFunc(ns, func(a, b Node) int { return strings.Compare(a.ID, b.ID) })
	writeList(w, ns)
	return nil
}

// listQueue serves GET /admin/queue: what waits for room, in queue order,
// with the wait reasons.
func (s *Server) listQueue(w http.ResponseWriter, r *http.Request, _ []byte) error {
	q, err := s.cfg.Backend.Queue(r.Context())
	if err != nil {
		return err
	}
	writeList(w, q)
	return nil
}

// setPools serves PUT /admin/nodes/{id}/pools (OPS-01).
func (s *Server) setPools(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req PoolsRequest
	if err := decode(body, &req); err != nil {
		return err
	}
	for _, p := range req.Pools {
		if p == "" || strings.ContainsAny(p, ", \t\n") {
			return fmt.Errorf("%w: pool name %q", ErrInvalid, p)
		}
	}
	id := r.PathValue("id")
	if err := s.cfg.Backend.SetPools(r.Context(), id, req.Pools); err != nil {
		return err
	}
	return noContent(w, s.audit(r.Context(), r, "node.pools", id, strings.Join(req.Pools, ",")))
}

// setCeiling serves PUT /admin/nodes/{id}/ceiling (OPS-02).
func (s *Server) setCeiling(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req CeilingRequest
	if err := decode(body, &req); err != nil {
		return err
	}
	if req.Ceiling < NoCeiling {
		return fmt.Errorf("%w: ceiling %d", ErrInvalid, req.Ceiling)
	}
	id := r.PathValue("id")
	if err := s.cfg.Backend.SetCeiling(r.Context(), id, req.Ceiling); err != nil {
		return err
	}
	return noContent(w, s.audit(r.Context(), r, "node.ceiling", id, CeilingText(req.Ceiling)))
}

// drain serves PUT /admin/nodes/{id}/drain.
func (s *Server) drain(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req DrainRequest
	if err := decode(body, &req); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := s.cfg.Backend.Drain(r.Context(), id, req.Drain); err != nil {
		return err
	}
	action := "node.drain"
	if !req.Drain {
		action = "node.undrain"
	}
	return noContent(w, s.audit(r.Context(), r, action, id, ""))
}

// getPolicy serves GET /admin/policy as a policy file (TOML).
func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request, _ []byte) error {
	p, err := s.cfg.Backend.Policy(r.Context())
	if err != nil {
		return err
	}
	b, err := EncodePolicy(p)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/toml")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	return nil
}

// setPolicy serves PUT /admin/policy: a policy file, decoded strictly and
// validated, handed to the Backend (OPS-03).
func (s *Server) setPolicy(w http.ResponseWriter, r *http.Request, body []byte) error {
	p, err := DecodePolicy("policy", body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := s.cfg.Backend.SetPolicy(r.Context(), p); err != nil {
		return err
	}
	return noContent(w, s.audit(r.Context(), r, "policy.set", "capacity-policy",
		fmt.Sprintf("%d headroom entries, %d tenants", len(p.Headroom), len(p.Tenants))))
}

// listProjects serves GET /admin/projects: every approval record.
func (s *Server) listProjects(w http.ResponseWriter, r *http.Request, _ []byte) error {
	as, err := s.cfg.Store.ListApprovals(r.Context())
	if err != nil {
		return err
	}
	writeList(w, as)
	return nil
}

// setApproval serves POST /admin/projects: approve or reject a project or
// server (OPS-06); a project or server the hub has not seen yet is
// recorded, so an operator may approve ahead (`vk-hub projects approve`
// asks for --unseen then, against typos). An instance given as a URL is
// read as its host[:port]. Idempotent.
func (s *Server) setApproval(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req ApprovalRequest
	if err := decode(body, &req); err != nil {
		return err
	}
	if req.Instance == "" || req.Project < 0 || (req.State != store.ApprovalApproved && req.State != store.ApprovalRejected) {
		return fmt.Errorf("%w: want instance, project >= 0 and state approved or rejected", ErrInvalid)
	}
	inst := store.InstanceKey(req.Instance)
	if inst == "" {
		return fmt.Errorf("%w: instance %q: want the host[:port] of a GitLab server, as vk-hub projects list shows it", ErrInvalid, req.Instance)
	}
	return noContent(w, RecordApproval(r.Context(), s.cfg.Store, s.cfg.Backend, inst, req.Project, req.State, actor(r), s.clk.Now().UTC()))
}

// RecordApproval records an operator's decision on a project (or, with
// project 0, on a GitLab server) as the admin socket and the web UI both
// do: stored, audited, then told to the hub. Idempotent.
func RecordApproval(ctx context.Context, st interface {
	store.Approvals
	store.Audit
}, b Backend, inst string, proj int64, state store.ApprovalState, by string, now time.Time) error {
	a, err := st.GetApproval(ctx, inst, proj)
	if errors.Is(err, store.ErrNotFound) {
		a, err = store.Approval{Instance: inst, Project: proj}, nil
	}
	if err != nil {
		return err
	}
	a.State, a.By, a.Updated = state, by, now
	if err := st.PutApproval(ctx, a); err != nil {
		return err
	}
	if err := AppendAudit(ctx, st, now, by, "approval."+string(state), ApprovalSubject(inst, proj), a.Path); err != nil {
		return err
	}
	return b.ApprovalChanged(ctx, a)
}

// ApprovalSubject is the audit subject of a decision on a project, or
// with project 0 on its GitLab server.
func ApprovalSubject(instance string, project int64) string {
	if project == 0 {
		return instance
	}
	return instance + "/" + strconv.FormatInt(project, 10)
}

// AppendAudit appends an operator's change to the audit log.
func AppendAudit(ctx context.Context, st store.Audit, now time.Time, actor, action, subject, detail string) error {
	if _, err := st.AppendAudit(ctx, store.AuditEntry{Time: now, Actor: actor, Action: action, Subject: subject, Detail: detail}); err != nil {
		return fmt.Errorf("admin: audit: %w", err)
	}
	return nil
}

// noContent answers 204 unless err, which it returns for the error writer.
func noContent(w http.ResponseWriter, err error) error {
	if err == nil {
		w.WriteHeader(http.StatusNoContent)
	}
	return err
}

// writeList answers 200 with the JSON array of l, [] when l is empty.
func writeList[T any](w http.ResponseWriter, l []T) {
	if l == nil {
		l = []T{}
	}
	api.WriteJSON(w, http.StatusOK, l)
}

// CeilingText is a ceiling as the CLI and the UI show it: "none" for
// [NoCeiling].
func CeilingText(n int) string {
	if n == NoCeiling {
		return "none"
	}
	return strconv.Itoa(n)
}
