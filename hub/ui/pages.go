package ui

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/logkey"
)

// nodeView is a node as the Fleet and node pages show it.
type nodeView struct {
	admin.Node
	// Cap is the node's effective concurrency cap as text ("8", or "—"
	// when neither a ceiling nor max_concurrency bounds it).
	Cap string
	// Held is Jobs + Reservations.
	Held int
	// Draining reports a draining or drained node (the form then offers
	// to end the drain).
	Draining bool
}

// count is one bucket of a summary line.
type count struct {
	Key string
	N   int
}

func viewNode(n admin.Node) nodeView {
	c := -1
	if n.Ceiling != admin.NoCeiling {
		c = n.Ceiling
	}
	if n.MaxConcurrency > 0 && (c < 0 || n.MaxConcurrency < c) {
		c = n.MaxConcurrency
	}
	capText := "—"
	if c >= 0 {
		capText = strconv.Itoa(c)
	}
	slices.Sort(n.Pools)
	slices.Sort(n.Labels)
	return nodeView{Node: n, Cap: capText, Held: n.Jobs + n.Reservations,
		Draining: n.State == "draining" || n.State == "drained"}
}

// counts tallies keys, most frequent first, then by key.
func counts(keys []string) []count {
	m := map[string]int{}
	for _, k := range keys {
		m[k]++
	}
	out := make([]count, 0, len(m))
	for k, n := range m {
		out = append(out, count{k, n})
	}
	slices.SortFunc(out, func(a, b count) int {
		return cmp.Or(cmp.Compare(b.N, a.N), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// FleetPageSize is how many nodes one Fleet page lists; ?page=N shows
// the others (a 30,000-node fleet is not one table).
const FleetPageSize = 200

// QueueShown is how many waiting entries the Queue page lists; its
// summary counts all of them.
const QueueShown = 500

// fleetFilter is the Fleet page's query: ?state=, ?pool=, ?q= (a
// substring of the ID, name or a label) and ?page= (from 1).
type fleetFilter struct {
	State, Pool, Q string
	Page           int
}

func (f fleetFilter) match(n *admin.Node) bool {
	if f.State != "" && n.State != f.State {
		return false
	}
	if f.Pool != "" && !slices.Contains(n.Pools, f.Pool) {
		return false
	}
	if f.Q == "" || strings.Contains(n.ID, f.Q) || strings.Contains(n.Name, f.Q) {
		return true
	}
	return slices.ContainsFunc(n.Labels, func(l string) bool { return strings.Contains(l, f.Q) })
}

// query returns the filter as a query string for page p ("" when empty).
func (f fleetFilter) query(p int) string {
	v := url.Values{}
	for k, x := range map[string]string{"state": f.State, "pool": f.Pool, "q": f.Q} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if p > 1 {
		v.Set("page", strconv.Itoa(p))
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// fleet serves GET <base>/: the nodes, filtered and paged, each with its
// forms (OPS-01, OPS-02); the summary counts the whole fleet.
func (s *server) fleet(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := fleetFilter{State: q.Get("state"), Pool: q.Get("pool"), Q: q.Get("q"), Page: 1}
	if v := q.Get("page"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 {
			return fmt.Errorf("%w: page %q is not a positive number", ErrBadForm, v)
		}
		f.Page = p
	}
	ns, err := s.cfg.Backend.Nodes(r.Context())
	if err != nil {
		return fmt.Errorf("ui: nodes: %w", err)
	}
	states := make([]string, len(ns))
	jobs := 0
	shown := make([]*admin.Node, 0, len(ns))
	for i := range ns {
		n := &ns[i]
		states[i] = n.State
		jobs += n.Jobs
		if f.match(n) {
			shown = append(shown, n)
		}
	}
	slices.SortFunc(shown, func(a, b *admin.Node) int { return cmp.Compare(a.ID, b.ID) })
	matched := len(shown)
	from := min((f.Page-1)*FleetPageSize, matched)
	to := min(from+FleetPageSize, matched)
	views := make([]nodeView, 0, to-from)
	for _, n := range shown[from:to] {
		views = append(views, viewNode(*n))
	}
	data := struct {
		Nodes              []nodeView
		States             []count
		Total, Jobs        int
		Matched, From, To  int
		Filter             fleetFilter
		Filtered           bool
		PrevPage, NextPage string
	}{Nodes: views, States: counts(states), Total: len(ns), Jobs: jobs, Matched: matched, From: from + 1, To: to,
		Filter: f, Filtered: f.State != "" || f.Pool != "" || f.Q != ""}
	if f.Page > 1 {
		data.PrevPage = s.url() + f.query(f.Page-1)
	}
	if to < matched {
		data.NextPage = s.url() + f.query(f.Page+1)
	}
	return s.render(w, r, http.StatusOK, "fleet", "Fleet", "fleet", data)
}

// node serves GET <base>/nodes/{id}: one node and its forms.
func (s *server) node(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	ns, err := s.cfg.Backend.Nodes(r.Context())
	if err != nil {
		return fmt.Errorf("ui: nodes: %w", err)
	}
	i := slices.IndexFunc(ns, func(n admin.Node) bool { return n.ID == id })
	if i < 0 {
		return fmt.Errorf("%w: node %q", errNotFound, id)
	}
	rows, err := s.cfg.Backend.Jobs(r.Context(), MaxJobs)
	if err != nil {
		return fmt.Errorf("ui: jobs: %w", err)
	}
	jobs := slices.DeleteFunc(rows, func(j JobRow) bool { return j.Node != id })
	return s.render(w, r, http.StatusOK, "node", "Node "+id, "fleet", struct {
		nodeView
		RecentJobs []JobRow
	}{viewNode(ns[i]), jobs[:min(len(jobs), 20)]})
}

// queue serves GET <base>/queue: what waits, with its wait reason; the
// first [QueueShown] entries listed, all of them counted.
func (s *server) queue(w http.ResponseWriter, r *http.Request) error {
	q, err := s.cfg.Backend.Queue(r.Context())
	if err != nil {
		return fmt.Errorf("ui: queue: %w", err)
	}
	reasons := make([]string, len(q))
	for i, it := range q {
		reasons[i] = cmp.Or(it.Reason, "waiting")
	}
	return s.render(w, r, http.StatusOK, "queue", "Queue", "queue", struct {
		Items   []Waiting
		Total   int
		Reasons []count
	}{q[:min(len(q), QueueShown)], len(q), counts(reasons)})
}

// limitParam reads ?limit=, def when absent, clamped to [1, max].
func limitParam(r *http.Request, def, max int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: limit %q is not a positive number", ErrBadForm, v)
	}
	return min(n, max), nil
}

// jobs serves GET <base>/jobs[?limit=N]: recent jobs, newest first.
func (s *server) jobs(w http.ResponseWriter, r *http.Request) error {
	limit, err := limitParam(r, DefaultJobs, MaxJobs)
	if err != nil {
		return err
	}
	rows, err := s.cfg.Backend.Jobs(r.Context(), limit)
	if err != nil {
		return fmt.Errorf("ui: jobs: %w", err)
	}
	return s.render(w, r, http.StatusOK, "jobs", "Jobs", "jobs", struct {
		Jobs  []JobRow
		Limit int
	}{rows, limit})
}

// job serves GET <base>/jobs/{id}: the job's record and its output tail.
func (s *server) job(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	j, err := s.cfg.Store.GetJob(r.Context(), id)
	if err != nil {
		return fmt.Errorf("ui: job %q: %w", id, err)
	}
	row := RowFromJob(j, s.clk.Now())
	out, err := s.cfg.Backend.JobOutputTail(r.Context(), id, s.cfg.OutputTail)
	note := ""
	switch {
	case (errors.Is(err, ErrNoOutput) || errors.Is(err, store.ErrNotFound) || errors.Is(err, admin.ErrNotFound)) && j.Settled:
		note = "The hub deleted this job's output once its result reached GitLab: read the job's trace in GitLab."
	case errors.Is(err, ErrNoOutput), errors.Is(err, store.ErrNotFound), errors.Is(err, admin.ErrNotFound):
		note = "No output is kept for this job."
	case err != nil:
		s.log.WarnContext(r.Context(), "job output not read", logkey.JobID, id, logkey.Err, err)
		note = "The output could not be read (see the hub's log)."
	case len(out) == 0:
		note = "No output yet."
	}
	var wait *Waiting
	if j.State == store.JobQueued {
		wait, err = s.queueEntry(r.Context(), WaitJob, id)
		if err != nil {
			return err
		}
	}
	return s.render(w, r, http.StatusOK, "job", "Job "+id, "jobs", struct {
		Job       JobRow
		Cancel    string
		OutputLen int64
		Output    string
		Truncated bool
		Note      string
		Wait      *Waiting
	}{row, string(j.Cancel), j.OutputLen, CleanOutput(out), int64(len(out)) < j.OutputLen && len(out) > 0, note, wait})
}

// queueEntry returns the queue's entry of kind for id, nil when it does
// not wait.
func (s *server) queueEntry(ctx context.Context, kind WaitingKind, id string) (*Waiting, error) {
	q, err := s.cfg.Backend.Queue(ctx)
	if err != nil {
		return nil, fmt.Errorf("ui: queue: %w", err)
	}
	for i := range q {
		if q[i].Kind == kind && q[i].ID == id {
			return &q[i], nil
		}
	}
	return nil, nil
}

// servers serves GET <base>/gitlab, GitLab › Servers: the servers pending
// approval first, then those decided, and the projects pending (OPS-06,
// API-56's server approval_url).
func (s *server) servers(w http.ResponseWriter, r *http.Request) error {
	as, err := s.cfg.Store.ListApprovals(r.Context())
	if err != nil {
		return fmt.Errorf("ui: approvals: %w", err)
	}
	var pending, decided, projects []store.Approval
	for _, a := range as {
		switch {
		case a.Project == 0 && a.State == store.ApprovalPending:
			pending = append(pending, a)
		case a.Project == 0:
			decided = append(decided, a)
		case a.State == store.ApprovalPending:
			projects = append(projects, a)
		}
	}
	return s.render(w, r, http.StatusOK, "servers", "GitLab › Servers", "gitlab", struct {
		Pending, Decided, Projects []store.Approval
	}{pending, decided, projects})
}

// project serves GET <base>/gitlab/{instance}/projects/{project}: the
// project's approval with approve/reject, what of it waits, its recent
// jobs and decisions (API-56's project approval_url).
func (s *server) project(w http.ResponseWriter, r *http.Request) error {
	inst, proj, err := approvalPath(r, true)
	if err != nil {
		return err
	}
	ctx := r.Context()
	a, err := s.cfg.Store.GetApproval(ctx, inst, proj)
	seen := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("ui: approval: %w", err)
	}
	if !seen {
		a = store.Approval{Instance: inst, Project: proj}
	}
	server, err := s.cfg.Store.GetApproval(ctx, inst, 0)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("ui: approval: %w", err)
	}
	q, err := s.cfg.Backend.Queue(ctx)
	if err != nil {
		return fmt.Errorf("ui: queue: %w", err)
	}
	waiting := slices.DeleteFunc(q, func(it Waiting) bool { return it.Instance != inst || it.Project != proj })
	rows, err := s.cfg.Backend.Jobs(ctx, MaxJobs)
	if err != nil {
		return fmt.Errorf("ui: jobs: %w", err)
	}
	jobs := slices.DeleteFunc(rows, func(j JobRow) bool { return j.Instance != inst || j.Project != proj })
	entries, err := s.cfg.Store.ListAudit(ctx, MaxAudit)
	if err != nil {
		return fmt.Errorf("ui: audit: %w", err)
	}
	history := slices.DeleteFunc(entries, func(e store.AuditEntry) bool { return e.Subject != admin.ApprovalSubject(inst, proj) })
	return s.render(w, r, http.StatusOK, "project", "Project "+cmp.Or(a.Path, strconv.FormatInt(proj, 10)), "gitlab", struct {
		Approval store.Approval
		Seen     bool
		Server   store.ApprovalState
		Waiting  []Waiting
		Jobs     []JobRow
		History  []store.AuditEntry
	}{a, seen, server.State, waiting, jobs[:min(len(jobs), 20)], history})
}

// approvalPath reads {instance} and, with withProject, {project} (> 0).
func approvalPath(r *http.Request, withProject bool) (string, int64, error) {
	// An instance is a GitLab server's host[:port] as approvals key it;
	// anything else (a URL, a made-up key) names no page.
	inst := r.PathValue("instance")
	if !store.ValidInstance(inst) {
		return "", 0, fmt.Errorf("%w: GitLab instance %q: want the host[:port] of a GitLab server", errNotFound, inst)
	}
	if !withProject {
		return inst, 0, nil
	}
	v := r.PathValue("project")
	p, err := strconv.ParseInt(v, 10, 64)
	if err != nil || p <= 0 {
		return "", 0, fmt.Errorf("%w: project %q", errNotFound, v)
	}
	return inst, p, nil
}

// tenantView is a tenant row of the policy page.
type tenantView struct {
	Name string
	admin.Tenant
}

// policy serves GET <base>/policy: the capacity policy, read-only; the
// CLI edits it (OPS-03).
func (s *server) policy(w http.ResponseWriter, r *http.Request) error {
	p, text, err := s.policyInForce(r.Context())
	if err != nil {
		return err
	}
	var tenants []tenantView
	for name, t := range p.Tenants {
		tenants = append(tenants, tenantView{name, t})
	}
	slices.SortFunc(tenants, func(a, b tenantView) int { return cmp.Compare(a.Name, b.Name) })
	return s.render(w, r, http.StatusOK, "policy", "Capacity policy", "policy", struct {
		Policy  admin.Policy
		Tenants []tenantView
		Text    string
	}{p, tenants, string(text)})
}

// policyInForce is the policy in force and its text as a policy file.
func (s *server) policyInForce(ctx context.Context) (admin.Policy, []byte, error) {
	p, err := s.cfg.Backend.Policy(ctx)
	if err != nil {
		return admin.Policy{}, nil, fmt.Errorf("ui: policy: %w", err)
	}
	text, err := admin.EncodePolicy(p)
	return p, text, err
}

// relays serves GET <base>/relays: the enrolled relays with their
// runners, each runner's tenant, placement and state, so a runner whose
// token GitLab refused, or that waits for a server approval, shows.
func (s *server) relays(w http.ResponseWriter, r *http.Request) error {
	rs, err := s.cfg.Backend.Relays(r.Context())
	if err != nil {
		return fmt.Errorf("ui: relays: %w", err)
	}
	var releases []admin.Release
	if s.cfg.Updates != nil {
		if releases, err = s.cfg.Updates.List(r.Context()); err != nil {
			return fmt.Errorf("ui: releases: %w", err)
		}
	}
	return s.render(w, r, http.StatusOK, "relays", "Relays", "relays", struct {
		Relays   []RelayRow
		Updates  bool
		Releases []admin.Release
	}{rs, s.cfg.Updates != nil, releases})
}

// audit serves GET <base>/audit[?limit=N]: the audit log, newest first.
func (s *server) audit(w http.ResponseWriter, r *http.Request) error {
	limit, err := limitParam(r, DefaultAudit, MaxAudit)
	if err != nil {
		return err
	}
	es, err := s.cfg.Store.ListAudit(r.Context(), limit)
	if err != nil {
		return fmt.Errorf("ui: audit: %w", err)
	}
	return s.render(w, r, http.StatusOK, "audit", "Audit log", "audit", struct {
		Entries []store.AuditEntry
		Limit   int
	}{es, limit})
}
