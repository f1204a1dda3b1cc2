package schedtest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vk-ci/vk/sched"
)

// commands is the scenario language: one handler per command (or command
// and subcommand), each with its usage line.
var commands = map[string]command{
	// Policy.
	"policy":     {"policy [probe_limit=N] [burst=N] [busy=S] [backoff_initial=S] [backoff_max=S] [lease=S] [renewals=N] [pack=F] [wide=F] [drains=N] [drain_hold=D]", (*Script).policy},
	"tenant":     {"tenant tn1 [weight=N] [cap=N] [projects=web,api]", (*Script).tenant},
	"rule":       {"rule tn1 project=P [nodes=n1,n2] [pools=a,b] [branches=main,release/*]", (*Script).rule},
	"production": {"production ru1", (*Script).production},
	"headroom":   {"headroom pool=P [labels=x] [mem=4G] [disk=1G] [cpu=1] slots=N", (*Script).headroom},

	// Nodes.
	"node add":         {"node add n1 cpu=N mem=SIZE disk=SIZE pool=a[,b] [labels=x] [max=N] [image_idle=D] [local] [state=ready|draining|maintenance]", (*Script).nodeAdd},
	"node held":        {"node held n1 [res=r1,r2] [jobs=j1]", (*Script).nodeHeld},
	"node load":        {"node load n1 LOAD1", (*Script).nodeLoad},
	"node unreachable": {"node unreachable n1", (*Script).nodeUnreachable},
	"node lost":        {"node lost n1", (*Script).nodeLost},
	"ceiling":          {"ceiling n1 N|zero", (*Script).ceiling},
	"drain":            {"drain n1 j9 (j0 clears)", (*Script).drain},

	// Relays and runners.
	"relay up":         {"relay up rl1 [session=N]", (*Script).relayUp},
	"relay down":       {"relay down rl1", (*Script).relayDown},
	"relay concurrent": {"relay concurrent rl1 N", (*Script).relayConcurrent},
	"runner":           {"runner ru1 relay=rl1 tenant=tn1 pool=P [labels=x] [mem=4G] [disk=10G] [cpu=2] [limit=N]", (*Script).runner},
	"heartbeat":        {"heartbeat rl1 [ru1 [req=a1,a2] [jobs=a3] [unadmitted=N]]...", (*Script).heartbeat},

	// Tickets, reservations and admissions.
	"queue":   {"queue t1 ru1", (*Script).queue},
	"poll":    {"poll t1", (*Script).poll},
	"cancel":  {"cancel t1", (*Script).cancel},
	"reply":   {"reply n1 r1 accept|refuse [lease=S] [reason=R]", (*Script).reply},
	"claim":   {"claim a2", (*Script).claim},
	"outcome": {"outcome a2 job|empty|error|released", (*Script).outcome},
	"renew":   {"renew a2", (*Script).renew},
	"renewed": {"renewed r1 REMAINING_SECS", (*Script).renewed},
	"release": {"release a2", (*Script).release},
	"gone":    {"gone r1 WHY", (*Script).gone},
	"refused": {"refused a2", (*Script).refused},
	"restore": {"restore adm=a7 res=r6 node=n1 runner=ru1 tenant=tn1 relay=rl1 [mem=4G] [disk=1G] [cpu=1] next=N", (*Script).restore},

	// Jobs.
	"submit":    {"submit j1 ru1 [adm=a2] [res=r1] [within=D] [project=P] [ref=R] [images=a,b] [name=N] [legacy]", (*Script).submit},
	"started":   {"started j1 n1 accept|refuse", (*Script).started},
	"finish":    {"finish j1 [name=N] [wall=D]", (*Script).finish},
	"settle":    {"settle j1", (*Script).settle},
	"canceljob": {"canceljob j1", (*Script).cancelJob},

	// Time.
	"tick": {"tick [+D]", (*Script).tick},

	// Questions to the Core.
	"reasons":   {"reasons", (*Script).reasons},
	"state":     {"state t1|a2|j1", (*Script).state},
	"fits":      {"fits pool=P [labels=x] [mem=4G] [disk=1G] [cpu=1]", (*Script).fits},
	"held":      {"held tn1", (*Script).held},
	"share":     {"share tn1 pool=P", (*Script).share},
	"util":      {"util POOL", (*Script).util},
	"immediate": {"immediate t1", (*Script).immediate},
	"drains":    {"drains", (*Script).drains},
	"stats":     {"stats JOBNAME", (*Script).stats},
	"ranked":    {"ranked pool=P [labels=x] [mem=4G] [disk=1G] [cpu=1]", (*Script).ranked},
}

func (s *Script) applyPolicy() []string { return s.step(sched.PolicyChanged{Policy: s.pol}) }

func (s *Script) policy(c *Cmd) []string {
	p := &s.pol
	ints := map[string]*int{"probe_limit": &p.ProbeLimit, "burst": &p.ProductionProbeBurst, "busy": &p.BusySecs,
		"backoff_initial": &p.BackoffInitialSecs, "backoff_max": &p.BackoffMaxSecs, "lease": &p.LeaseSecs,
		"renewals": &p.ClaimRenewals, "drains": &p.DrainsPerPool}
	floats := map[string]*float64{"pack": &p.PackAboveUtilization, "wide": &p.WideFraction}
	for k := range c.Keys {
		switch {
		case ints[k] != nil:
			*ints[k] = c.Int(k)
		case floats[k] != nil:
			*floats[k] = c.Float(c.Str(k))
		case k == "drain_hold":
			p.DrainMaxHold = c.Dur(k)
		}
	}
	return s.applyPolicy()
}

func (s *Script) tenant(c *Cmd) []string {
	tid := sched.TenantID(c.ID(0))
	tp := s.pol.Tenants[tid]
	tp.Weight, tp.Cap = c.Int("weight"), c.Int("cap")
	if c.Has("projects") {
		old := tp.Projects
		tp.Projects = map[string]sched.ProjectPolicy{}
		for _, p := range c.List("projects") {
			tp.Projects[p] = old[p]
		}
	}
	s.pol.Tenants[tid] = tp
	return s.applyPolicy()
}

func (s *Script) rule(c *Cmd) []string {
	tid := sched.TenantID(c.ID(0))
	tp := s.pol.Tenants[tid]
	if tp.Projects == nil {
		tp.Projects = map[string]sched.ProjectPolicy{}
	}
	project := c.Str("project")
	pp := tp.Projects[project]
	pp.Rules = append(slices.Clone(pp.Rules), sched.PlacementRule{Nodes: IDList[sched.NodeID](c, "nodes"),
		Pools: c.List("pools"), Branches: c.List("branches")})
	tp.Projects[project] = pp
	s.pol.Tenants[tid] = tp
	return s.applyPolicy()
}

func (s *Script) production(c *Cmd) []string {
	s.pol.ProductionRunners[sched.RunnerID(c.ID(0))] = true
	return s.applyPolicy()
}

func (s *Script) headroom(c *Cmd) []string {
	s.pol.Headroom = append(s.pol.Headroom, sched.HeadroomEntry{Placement: s.placement(c), Slots: c.Int("slots")})
	return s.applyPolicy()
}

func (s *Script) nodeAdd(c *Cmd) []string {
	n := sched.NodeID(c.ID(0))
	r := sched.NodeReport{Node: n, Capacity: s.resources(c), Pools: c.List("pool"), Labels: c.List("labels"),
		MaxConcurrency: c.Int("max"), LocalRunner: c.Flag("local"), ImageCacheIdle: c.Dur("image_idle")}
	switch st := c.Str("state"); st {
	case "", "ready":
	case "draining":
		r.State = sched.NodeDraining
	case "maintenance":
		r.State = sched.NodeMaintenance
	default:
		c.Fatalf("state=%s: want ready, draining or maintenance", st)
	}
	s.reports[n] = r
	return s.step(r)
}

func (s *Script) nodeHeld(c *Cmd) []string {
	r := s.reports[sched.NodeID(c.ID(0))]
	r.Held = &sched.Held{Reservations: IDList[sched.ReservationID](c, "res"), Jobs: IDList[sched.JobID](c, "jobs")}
	return s.step(r)
}

func (s *Script) nodeLoad(c *Cmd) []string {
	return s.step(sched.NodeHeartbeat{Node: sched.NodeID(c.ID(0)), Load1: c.Float(c.NeedArg(1)), HasLoad: true})
}

func (s *Script) nodeUnreachable(c *Cmd) []string {
	return s.step(sched.NodeUnreachable{Node: sched.NodeID(c.ID(0))})
}

func (s *Script) nodeLost(c *Cmd) []string {
	return s.step(sched.NodeLost{Node: sched.NodeID(c.ID(0))})
}

func (s *Script) ceiling(c *Cmd) []string {
	n := sched.NodeID(c.ID(0))
	if c.NeedArg(1) == "zero" {
		return s.step(sched.CeilingSet{Node: n, Zero: true})
	}
	return s.step(sched.CeilingSet{Node: n, Ceiling: c.IntArg(1)})
}

func (s *Script) drain(c *Cmd) []string {
	return s.step(sched.DrainReserve{Node: sched.NodeID(c.ID(0)), Job: sched.JobID(c.ID(1))})
}

func (s *Script) relayUp(c *Cmd) []string {
	sess := uint64(len(s.H.Log) + 1)
	if c.Has("session") {
		sess = uint64(c.Int("session"))
	}
	return s.step(sched.RelayUp{Relay: sched.RelayID(c.ID(0)), Session: sess})
}

func (s *Script) relayDown(c *Cmd) []string {
	return s.step(sched.RelayDown{Relay: sched.RelayID(c.ID(0))})
}

func (s *Script) relayConcurrent(c *Cmd) []string {
	inv := s.relayInv(sched.RelayID(c.ID(0)))
	inv.Concurrent = c.IntArg(1)
	return s.step(*inv)
}

func (s *Script) runner(c *Cmd) []string {
	inv := s.relayInv(sched.RelayID(c.KeyID("relay")))
	ri := sched.RunnerInfo{Runner: sched.RunnerID(c.ID(0)), Tenant: sched.TenantID(c.KeyID("tenant")),
		Placement: s.placement(c), Limit: c.Int("limit"), RequestConcurrency: 4}
	i := slices.IndexFunc(inv.Runners, func(x sched.RunnerInfo) bool { return x.Runner == ri.Runner })
	if i >= 0 {
		inv.Runners[i] = ri
	} else {
		inv.Runners = append(inv.Runners, ri)
	}
	return s.step(*inv)
}

// heartbeat reads its arguments in order: each bare word starts a runner,
// the key=value arguments after it describe that runner.
func (s *Script) heartbeat(c *Cmd) []string {
	toks := c.Tokens()
	if len(toks) == 0 {
		c.Fatalf("missing relay")
	}
	hb := sched.RelayHeartbeat{Relay: sched.RelayID(c.parseID(toks[0]))}
	for _, tok := range toks[1:] {
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			hb.Runners = append(hb.Runners, sched.RunnerBeat{Runner: sched.RunnerID(c.parseID(tok))})
			continue
		}
		if len(hb.Runners) == 0 {
			c.Fatalf("%s before a runner", tok)
		}
		b := &hb.Runners[len(hb.Runners)-1]
		switch k {
		case "req":
			b.RequestAdmissions = parseIDs[sched.AdmissionID](c, v)
		case "jobs":
			b.JobAdmissions = parseIDs[sched.AdmissionID](c, v)
		case "unadmitted":
			b.UnadmittedJobs = c.atoi(v)
		default:
			c.Fatalf("unknown argument %s=", k)
		}
	}
	return s.step(hb)
}

func (s *Script) queue(c *Cmd) []string {
	return s.step(sched.TicketQueued{Ticket: sched.TicketID(c.ID(0)), Runner: sched.RunnerID(c.ID(1))})
}

func (s *Script) poll(c *Cmd) []string {
	return s.step(sched.TicketPolled{Ticket: sched.TicketID(c.ID(0))})
}

func (s *Script) cancel(c *Cmd) []string {
	return s.step(sched.TicketCancelled{Ticket: sched.TicketID(c.ID(0))})
}

func (s *Script) reply(c *Cmd) []string {
	accepted := c.acceptOrRefuse(2)
	return s.step(sched.OfferReplied{Node: sched.NodeID(c.ID(0)), Reservation: sched.ReservationID(c.ID(1)),
		Accepted: accepted, LeaseSecs: c.Int("lease"), Reason: c.Str("reason")})
}

func (s *Script) claim(c *Cmd) []string {
	return s.step(sched.Claimed{Admission: sched.AdmissionID(c.ID(0))})
}

func (s *Script) outcome(c *Cmd) []string {
	kinds := map[string]sched.OutcomeKind{"job": sched.OutcomeJob, "empty": sched.OutcomeEmpty,
		"error": sched.OutcomeError, "released": sched.OutcomeReleased}
	k, ok := kinds[c.NeedArg(1)]
	if !ok {
		c.Fatalf("outcome %q: want job, empty, error or released", c.Arg(1))
	}
	return s.step(sched.Outcome{Admission: sched.AdmissionID(c.ID(0)), Kind: k})
}

func (s *Script) renew(c *Cmd) []string {
	return s.step(sched.RenewRequested{Admission: sched.AdmissionID(c.ID(0))})
}

func (s *Script) renewed(c *Cmd) []string {
	return s.step(sched.Renewed{Reservation: sched.ReservationID(c.ID(0)), RemainingSecs: c.IntArg(1)})
}

func (s *Script) release(c *Cmd) []string {
	return s.step(sched.Released{Admission: sched.AdmissionID(c.ID(0))})
}

func (s *Script) gone(c *Cmd) []string {
	return s.step(sched.LeaseGone{Reservation: sched.ReservationID(c.ID(0)), Why: c.NeedArg(1)})
}

func (s *Script) refused(c *Cmd) []string {
	return s.step(sched.SubmissionRefused{Admission: sched.AdmissionID(c.ID(0))})
}

func (s *Script) restore(c *Cmd) []string {
	ra := sched.RestoredAdmission{Admission: sched.AdmissionID(c.KeyID("adm")), Reservation: sched.ReservationID(c.KeyID("res")),
		Node: sched.NodeID(c.KeyID("node")), Runner: sched.RunnerID(c.KeyID("runner")), Tenant: sched.TenantID(c.KeyID("tenant")),
		Relay: sched.RelayID(c.KeyID("relay")), Placement: sched.Placement{Envelope: s.resources(c)}}
	return s.step(sched.Restore{Admissions: []sched.RestoredAdmission{ra}, NextID: uint64(c.Int("next"))})
}

func (s *Script) submit(c *Cmd) []string {
	return s.step(sched.JobSubmitted{Job: sched.JobID(c.ID(0)), Runner: sched.RunnerID(c.ID(1)),
		Admission: sched.AdmissionID(c.KeyID("adm")), Reservation: sched.ReservationID(c.KeyID("res")),
		Project: c.Str("project"), Ref: c.Str("ref"), Legacy: c.Flag("legacy"), Images: c.List("images"),
		Name: c.Str("name"), PlaceWithin: c.Dur("within")})
}

func (s *Script) started(c *Cmd) []string {
	accepted := c.acceptOrRefuse(2)
	return s.step(sched.JobStartReplied{Job: sched.JobID(c.ID(0)), Node: sched.NodeID(c.ID(1)), Accepted: accepted})
}

func (s *Script) finish(c *Cmd) []string {
	return s.step(sched.JobFinished{Job: sched.JobID(c.ID(0)), Name: c.Str("name"), Wall: c.Dur("wall")})
}

func (s *Script) settle(c *Cmd) []string { return s.step(sched.JobSettled{Job: sched.JobID(c.ID(0))}) }

func (s *Script) cancelJob(c *Cmd) []string {
	return s.step(sched.JobCancelled{Job: sched.JobID(c.ID(0))})
}

func (s *Script) tick(c *Cmd) []string {
	return render(s.H.Advance(c.duration(strings.TrimPrefix(c.Arg(0), "+"))))
}

func (s *Script) reasons(c *Cmd) []string {
	var out []string
	for _, t := range s.H.Core.WaitingTickets() {
		v, _ := s.H.Core.Ticket(t)
		out = append(out, fmt.Sprintf("t%d %s %s", t, v.State, v.Wait.Text()))
	}
	for _, j := range s.H.Core.Jobs() {
		v, _ := s.H.Core.Job(j)
		if v.State == "queued" || v.State == "starting" {
			out = append(out, fmt.Sprintf("j%d %s %s", j, v.State, v.Wait.Text()))
		}
	}
	return out
}

func (s *Script) state(c *Cmd) []string {
	core := s.H.Core
	name := c.NeedArg(0)
	switch name[0] {
	case 't':
		v, ok := core.Ticket(sched.TicketID(c.ID(0)))
		if !ok {
			return []string{"gone"}
		}
		if v.Grant != nil {
			return []string{v.State + " " + v.Grant.String()}
		}
		return []string{v.State}
	case 'a':
		st, oc, ok := core.AdmissionState(sched.AdmissionID(c.ID(0)))
		if !ok {
			return []string{"unknown"}
		}
		return []string{st + " outcome=" + oc.String()}
	case 'j':
		v, ok := core.Job(sched.JobID(c.ID(0)))
		if !ok {
			return []string{"unknown"}
		}
		return []string{fmt.Sprintf("%s n%d", v.State, v.Node)}
	}
	c.Fatalf("%q: want a ticket (t1), an admission (a1) or a job (j1)", name)
	return nil
}

func (s *Script) fits(c *Cmd) []string { return []string{fmt.Sprint(s.H.Core.Fits(s.placement(c)))} }

func (s *Script) held(c *Cmd) []string {
	return []string{fmt.Sprint(s.H.Core.Held(sched.TenantID(c.ID(0))))}
}

func (s *Script) share(c *Cmd) []string {
	return []string{fmt.Sprintf("%.4f", s.H.Core.Share(sched.TenantID(c.ID(0)), c.Str("pool")))}
}

func (s *Script) util(c *Cmd) []string {
	return []string{fmt.Sprintf("%.3f", s.H.Core.Utilization(c.NeedArg(0)))}
}

func (s *Script) immediate(c *Cmd) []string {
	v, ok := s.H.Core.Ticket(sched.TicketID(c.ID(0)))
	return []string{fmt.Sprintf("%v %v", v.Immediate, ok)}
}

func (s *Script) drains(c *Cmd) []string {
	var out []string
	for _, n := range s.H.Core.Nodes() {
		switch {
		case n.DrainJob != 0:
			out = append(out, fmt.Sprintf("n%d drained for j%d", n.ID, n.DrainJob))
		case n.DrainFor != "":
			out = append(out, fmt.Sprintf("n%d drained for %s", n.ID, n.DrainFor))
		}
	}
	return out
}

func (s *Script) stats(c *Cmd) []string {
	st := s.H.Core.RuntimeStats(c.NeedArg(0))
	return []string{fmt.Sprintf("count=%d total=%s longest=%s buckets=%v", st.Count, st.Total, st.Longest, st.Buckets)}
}

func (s *Script) ranked(c *Cmd) []string {
	var out []string
	ok := s.H.Core.Snapshot().Ranked(s.placement(c), func(r sched.RankedNode) bool {
		out = append(out, fmt.Sprintf("n%d load=%.3f room=%d", r.ID, r.Load, r.Room))
		return true
	})
	if !ok {
		out = append(out, "no such placement")
	}
	return out
}

// acceptOrRefuse reads positional argument i, "accept" (true) or
// "refuse" (false); anything else fails the script.
func (c *Cmd) acceptOrRefuse(i int) bool {
	c.t.Helper()
	switch a := c.NeedArg(i); a {
	case "accept":
		return true
	case "refuse":
		return false
	default:
		c.Fatalf("%q: want accept or refuse", a)
		return false
	}
}
