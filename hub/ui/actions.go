package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
)

// Form kinds bound into CSRF tokens, one per action.
const (
	formPools    = "node.pools"
	formCeiling  = "node.ceiling"
	formDrain    = "node.drain"
	formApproval = "approval"
	formUpdate   = "relay.update"
)

// verify refuses a POST whose CSRF token is not that of form.
func (s *server) verify(r *http.Request, form ...string) error {
	if !s.checkCSRF(r, form...) {
		return fmt.Errorf("%w: CSRF token missing or wrong for %s", ErrForbidden, strings.Join(form, " "))
	}
	return nil
}

// back is where a node form returns: the node's page, or with back=fleet
// the Fleet page.
func (s *server) back(r *http.Request, id string) string {
	if r.PostFormValue("back") == "fleet" {
		return s.url()
	}
	return s.url("nodes", id)
}

// writeAudit appends an audit entry by the request's operator.
func (s *server) writeAudit(ctx context.Context, action, subject, detail string) error {
	return admin.AppendAudit(ctx, s.cfg.Store, s.clk.Now().UTC(), operatorOf(ctx), action, subject, detail)
}

// ParsePools reads a pools field: names separated by commas or white
// space; empty means no pool. A name is at most 128 bytes of printable
// characters. Errors wrap [ErrBadForm].
func ParsePools(v string) ([]string, error) {
	fields := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
	pools := []string{}
	for _, f := range fields {
		if len(f) > 128 || strings.IndexFunc(f, func(r rune) bool { return r < 0x20 || r == 0x7f || r == 0xfffd }) >= 0 {
			return nil, fmt.Errorf("%w: pool name %q", ErrBadForm, f)
		}
		if !slices.Contains(pools, f) {
			pools = append(pools, f)
		}
	}
	if len(pools) > 64 {
		return nil, fmt.Errorf("%w: %d pools, at most 64", ErrBadForm, len(pools))
	}
	return pools, nil
}

// ParseCeiling reads a ceiling field: a whole number >= 0, or "" or
// "none" for [admin.NoCeiling]. Errors wrap [ErrBadForm].
func ParseCeiling(v string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" || strings.EqualFold(v, "none") {
		return admin.NoCeiling, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1<<20 {
		return 0, fmt.Errorf("%w: ceiling %q: want a whole number >= 0 or none", ErrBadForm, v)
	}
	return n, nil
}

// setPools serves POST <base>/nodes/{id}/pools (OPS-01): pools=a,b.
func (s *server) setPools(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := s.verify(r, formPools, id); err != nil {
		return err
	}
	pools, err := ParsePools(r.PostFormValue("pools"))
	if err != nil {
		return err
	}
	if err := s.cfg.Backend.SetPools(r.Context(), id, pools); err != nil {
		return fmt.Errorf("ui: set pools of %s: %w", id, err)
	}
	if err := s.writeAudit(r.Context(), "node.pools", id, strings.Join(pools, ",")); err != nil {
		return err
	}
	return s.redirect(w, r, s.back(r, id), "pools")
}

// setCeiling serves POST <base>/nodes/{id}/ceiling (OPS-02): ceiling=N
// or none.
func (s *server) setCeiling(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := s.verify(r, formCeiling, id); err != nil {
		return err
	}
	n, err := ParseCeiling(r.PostFormValue("ceiling"))
	if err != nil {
		return err
	}
	if err := s.cfg.Backend.SetCeiling(r.Context(), id, n); err != nil {
		return fmt.Errorf("ui: set ceiling of %s: %w", id, err)
	}
	if err := s.writeAudit(r.Context(), "node.ceiling", id, admin.CeilingText(n)); err != nil {
		return err
	}
	return s.redirect(w, r, s.back(r, id), "ceiling")
}

// setDrain serves POST <base>/nodes/{id}/drain: drain=on starts draining,
// drain=off ends it (NODE-05).
func (s *server) setDrain(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := s.verify(r, formDrain, id); err != nil {
		return err
	}
	var on bool
	switch r.PostFormValue("drain") {
	case "on":
		on = true
	case "off":
	default:
		return fmt.Errorf("%w: drain %q: want on or off", ErrBadForm, r.PostFormValue("drain"))
	}
	if err := s.cfg.Backend.Drain(r.Context(), id, on); err != nil {
		return fmt.Errorf("ui: drain %s: %w", id, err)
	}
	action, done := "node.drain", "drain"
	if !on {
		action, done = "node.undrain", "undrain"
	}
	if err := s.writeAudit(r.Context(), action, id, ""); err != nil {
		return err
	}
	return s.redirect(w, r, s.back(r, id), done)
}

// decideServer serves POST <base>/gitlab/{instance}/approval: approve or
// reject a GitLab server (OPS-06); it returns to GitLab › Servers.
func (s *server) decideServer(w http.ResponseWriter, r *http.Request) error {
	inst, _, err := approvalPath(r, false)
	if err != nil {
		return err
	}
	st, err := s.decide(r, inst, 0)
	if err != nil {
		return err
	}
	return s.redirect(w, r, s.url("gitlab"), string(st))
}

// decideProject serves POST
// <base>/gitlab/{instance}/projects/{project}/approval: approve or reject
// a project (OPS-06); it returns to the project's page.
func (s *server) decideProject(w http.ResponseWriter, r *http.Request) error {
	inst, proj, err := approvalPath(r, true)
	if err != nil {
		return err
	}
	st, err := s.decide(r, inst, proj)
	if err != nil {
		return err
	}
	return s.redirect(w, r, s.url("gitlab", inst, "projects", proj), string(st))
}

// decide records the operator's decision (state=approved|rejected) as the
// admin socket does: store, audit, then tell the hub. Idempotent.
func (s *server) decide(r *http.Request, inst string, proj int64) (store.ApprovalState, error) {
	if err := s.verify(r, formApproval, inst, strconv.FormatInt(proj, 10)); err != nil {
		return "", err
	}
	st := store.ApprovalState(r.PostFormValue("state"))
	if st != store.ApprovalApproved && st != store.ApprovalRejected {
		return "", fmt.Errorf("%w: state %q: want approved or rejected", ErrBadForm, st)
	}
	ctx := r.Context()
	// Only a server the hub has seen (a relay reported it) can be decided
	// on, itself or its projects: a decision on a mistyped instance
	// would sit in the store matching nothing.
	if _, err := s.cfg.Store.GetApproval(ctx, inst, 0); errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("%w: GitLab server %s has not been seen by the hub", errNotFound, inst)
	} else if err != nil {
		return "", fmt.Errorf("ui: approval: %w", err)
	}
	if err := admin.RecordApproval(ctx, s.cfg.Store, s.cfg.Backend, inst, proj, st, operatorOf(ctx), s.clk.Now().UTC()); err != nil {
		return "", fmt.Errorf("ui: approval: %w", err)
	}
	return st, nil
}

// updateRelay serves POST <base>/relays/{id}/update: send the relay a
// published release to install (OPS-04), audited as the admin socket's
// relays update is; it returns to the Relays page.
func (s *server) updateRelay(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := s.verify(r, formUpdate, id); err != nil {
		return err
	}
	if s.cfg.Updates == nil {
		return errNotFound
	}
	rel := strings.TrimSpace(r.PostFormValue("release"))
	if rel == "" {
		return fmt.Errorf("%w: no release chosen", ErrBadForm)
	}
	if err := s.cfg.Updates.UpdateRelay(r.Context(), id, rel); err != nil {
		return fmt.Errorf("ui: update relay %s: %w", id, err)
	}
	if err := s.writeAudit(r.Context(), "relay.update", id, rel); err != nil {
		return err
	}
	return s.redirect(w, r, s.url("relays"), "update")
}
