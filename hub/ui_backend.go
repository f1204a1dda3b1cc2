package hub

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/vk-ci/vk/hub/output"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/ui"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/sched"
)

// The driver implements ui.Backend: the web UI's view of live state
// (admin.Backend plus the queue, recent jobs and job output).
var _ ui.Backend = (*Driver)(nil)

// Queue implements admin.Backend (`vk-hub queue`) and the UI's Queue page: the waiting tickets (queued, offered or
// granted and unclaimed) in ticket order, then the queued jobs in
// submission order, each with the core's wait reason, class, position
// among the requests of its placement and estimated wait. It reads the
// core on the driver's goroutine.
func (d *Driver) Queue(ctx context.Context) ([]ui.Waiting, error) {
	r := &queueReq{}
	err := d.ask(ctx, r)
	return r.rows, err
}

type queueReq struct{ rows []ui.Waiting }

func (q *queueReq) run(d *Driver) {
	for _, id := range d.core.WaitingTickets() {
		t := d.tickets[id]
		v, ok := d.core.Ticket(id)
		if t == nil || !ok {
			continue
		}
		w := ui.Waiting{Kind: ui.WaitTicket, ID: ticketWire(d.epoch, id), Relay: t.owner, Runner: t.runner, Reason: v.Wait.Text(),
			Since: t.queued, Idle: v.Wait.Code == sched.ReasonBackoff}
		if r := d.relays[t.owner]; r != nil {
			if rr, ok := r.runners[t.runner]; ok {
				w.Tenant, w.Placement = rr.tenant, ui.PlacementText(rr.placement)
				if v.Wait.Code == sched.ReasonNoRoom {
					w.Reason += d.closedPoolNote(rr.placement.Pool)
				}
			}
		}
		pos, pok := d.core.TicketPosition(id)
		d.withPosition(&w, pos, pok)
		q.rows = append(q.rows, w)
	}
	// Runners that ask for nothing because their server waits for
	// approval hold no ticket: list them, or the queue reads empty.
	for _, name := range sortedKeys(d.relays) {
		r := d.relays[name]
		if r.send == nil || r.report == nil {
			continue
		}
		for _, rr := range r.report.Runners {
			if r.states[rr.Name] != client.RunnerServerPending {
				continue
			}
			inst := store.InstanceKey(r.report.GitLabURL)
			reason := "waiting: its GitLab server is pending approval (vk-hub projects list)"
			if inst != "" {
				reason = "waiting: GitLab server " + inst + " is pending approval (vk-hub projects approve " + inst + " server)"
			}
			q.rows = append(q.rows, ui.Waiting{Kind: ui.WaitRunner, ID: rr.Name, Relay: name, Runner: rr.Name, Tenant: r.runners[rr.Name].tenant,
				Instance: inst, Placement: ui.PlacementText(rr.Placement), Reason: reason})
		}
	}
	for _, sid := range d.core.Jobs() {
		j := d.jobs[sid]
		if j == nil || j.rec.State != store.JobQueued {
			continue
		}
		w := ui.Waiting{Kind: ui.WaitJob, ID: j.rec.ID, Tenant: j.rec.Tenant, Relay: j.rec.Principal, Runner: j.rec.Runner,
			Instance: store.InstanceKey(j.rec.Instance), Project: j.rec.Project, Placement: ui.PlacementKeyText(j.rec.Placement), Since: j.rec.Created}
		if v, ok := d.core.Job(sid); ok {
			w.Reason = v.Wait.Text()
			if p, ok := parsePlacementKey(j.rec.Placement); ok && v.Wait.Code == sched.ReasonNoRoom {
				w.Reason += d.closedPoolNote(p.Pool)
			}
		}
		pos, pok := d.core.JobPosition(sid)
		d.withPosition(&w, pos, pok)
		q.rows = append(q.rows, w)
	}
}

// closedPoolNote says why a pool has no room when an operator closed it:
// every connected node of the pool has ceiling 0 or is drained at the
// hub. "" when some node of it is open (the scheduler's reason says the
// rest). On the driver's goroutine.
func (d *Driver) closedPoolNote(pool string) string {
	n, closed := 0, 0
	for _, name := range sortedKeys(d.nodes) {
		nr := d.nodes[name]
		if nr.send == nil || nr.report == nil {
			continue
		}
		set := d.nodeSets[name]
		pools := nr.report.Pools
		if set.PoolsSet {
			pools = set.Pools
		}
		if !slices.Contains(pools, pool) {
			continue
		}
		n++
		if set.Zero || set.Drain {
			closed++
		}
	}
	switch {
	case n == 0 || closed < n:
		return ""
	case n == 1:
		return fmt.Sprintf(" (the one node of pool %s has ceiling 0 or is drained: vk-hub nodes ceiling <id> none, or nodes undrain <id>)", pool)
	}
	return fmt.Sprintf(" (all %d nodes of pool %s have ceiling 0 or are drained: vk-hub nodes ceiling <id> none, or nodes undrain <id>)", n, pool)
}

// Relays implements ui.Backend: the enrolled relays from the store, each
// with its session and the runners of its last report, read on the
// driver's goroutine.
func (d *Driver) Relays(ctx context.Context) ([]ui.RelayRow, error) {
	ps, err := d.st.ListPrincipals(ctx)
	if err != nil {
		return nil, err
	}
	r := &relaysReq{enrolled: ps}
	err = d.ask(ctx, r)
	slices.SortFunc(r.rows, func(a, b ui.RelayRow) int { return cmp.Compare(a.ID, b.ID) })
	return r.rows, err
}

type relaysReq struct {
	enrolled []store.Principal
	rows     []ui.RelayRow
}

func (r *relaysReq) run(d *Driver) {
	for _, p := range r.enrolled {
		if p.Kind != store.KindRelay || p.Removed {
			continue
		}
		row := ui.RelayRow{ID: p.ID, Name: p.Name}
		if rel := d.relays[p.ID]; rel != nil {
			row.Connected = rel.send != nil
			if rep := rel.report; rep != nil {
				row.GitLab, row.Release, row.Host = rep.GitLabURL, rep.Release, rep.Host
				row.AllowsUpdate = slices.Contains(rep.Allow, client.RelayAllowUpdate)
				for _, rr := range rep.Runners {
					rec := rel.runners[rr.Name]
					row.Runners = append(row.Runners, ui.RunnerRow{Name: rr.Name, Tenant: rec.tenant,
						Placement: ui.PlacementText(rr.Placement), RequestConcurrency: rr.RequestConcurrency, Limit: rr.Limit,
						TokenAccepted: rr.TokenAccepted, State: string(rel.states[rr.Name])})
				}
			}
		}
		r.rows = append(r.rows, row)
	}
}

// Jobs implements ui.Backend: up to limit job records of the store,
// newest (by creation) first.
func (d *Driver) Jobs(ctx context.Context, limit int) ([]ui.JobRow, error) {
	if limit <= 0 {
		return nil, nil
	}
	all, err := d.st.ListJobs(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("hub: listing jobs: %w", err)
	}
	slices.SortFunc(all, func(a, b store.Job) int {
		return cmp.Or(b.Created.Compare(a.Created), cmp.Compare(a.ID, b.ID))
	})
	all = all[:min(limit, len(all))]
	now := d.now()
	out := make([]ui.JobRow, 0, len(all))
	for _, j := range all {
		out = append(out, ui.RowFromJob(j, now))
	}
	return out, nil
}

// JobOutputTail implements ui.Backend: the last max bytes of the job's
// output (at most output.MaxRead); ui.ErrNoOutput when none is kept.
func (d *Driver) JobOutputTail(ctx context.Context, id string, max int) ([]byte, error) {
	if !validJobID(id) {
		return nil, fmt.Errorf("%w: job %q", ui.ErrNoOutput, id)
	}
	n, _, err := d.out.Len(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ui.ErrNoOutput, err)
	}
	if n == 0 {
		return nil, ui.ErrNoOutput
	}
	max = min(max, output.MaxRead)
	c, err := d.out.ReadAt(ctx, id, n-int64(min(int64(max), n)), max)
	if err != nil {
		return nil, err
	}
	return c.Data, nil
}
