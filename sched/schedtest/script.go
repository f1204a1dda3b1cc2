package schedtest

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/sched"
)

// RunScript runs a scenario file: blocks of a command line, a "----" line
// and the expected output, separated by blank lines; lines starting with #
// are comments. Each command's output is the step's verdict (if any)
// followed by its other actions sorted, or what a query prints. With
// rewrite the file's expected outputs are replaced by the actual ones.
// The script language is documented in sched/README.md ("Scenarios").
func RunScript(t *testing.T, path string, rewrite bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := &Script{H: New(sched.Policy{}, 1)}
	s.H.Check = true
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		cmd := line
		var want []string
		if i+1 < len(lines) && lines[i+1] == "----" {
			i += 2
			for ; i < len(lines) && lines[i] != ""; i++ {
				want = append(want, lines[i])
			}
		}
		got, err := s.Run(cmd)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", path, i+1, cmd, err)
		}
		fmt.Fprintf(&out, "%s\n----\n", cmd)
		for _, g := range got {
			out.WriteString(g + "\n")
		}
		out.WriteString("\n")
		if !rewrite && !slices.Equal(got, want) {
			t.Errorf("%s: %s\ngot:\n  %s\nwant:\n  %s", path, cmd, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		if i+1 < len(lines) && lines[i+1] == "" {
			i++
		}
	}
	for _, f := range s.H.Failures {
		t.Errorf("%s: invariant: %s", path, f)
	}
	if rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Script interprets scenario commands against a Harness.
type Script struct {
	H       *Harness
	pol     sched.Policy
	reports map[sched.NodeID]sched.NodeReport
	inv     map[sched.RelayID]*sched.RelayInventory
}

// parseError is a script argument that does not parse. The argument
// readers panic with it, and Run turns it into its error, so a typo such as
// cpu=8x fails the script instead of reading as 0.
type parseError struct{ msg string }

func (e parseError) Error() string { return e.msg }

// id reads an identifier such as n1 or r12 (a prefix, then a number); ""
// is 0.
func id(s string) uint64 {
	if s == "" {
		return 0
	}
	i := strings.IndexFunc(s, func(r rune) bool { return r >= '0' && r <= '9' })
	if i < 0 {
		panic(parseError{fmt.Sprintf("identifier %q has no number", s)})
	}
	v, err := strconv.ParseUint(s[i:], 10, 64)
	if err != nil {
		panic(parseError{fmt.Sprintf("identifier %q: want a prefix and a number", s)})
	}
	return v
}

func ids[T ~uint32 | ~uint64](s string) []T {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f != "" {
			out = append(out, T(id(f)))
		}
	}
	return out
}

func kv(fields []string) (pos []string, m map[string]string) {
	m = map[string]string{}
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		} else {
			pos = append(pos, f)
		}
	}
	return pos, m
}

// atoi reads a whole number; "" is 0.
func atoi(s string) int {
	if s == "" {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		panic(parseError{fmt.Sprintf("%q is not a whole number", s)})
	}
	return v
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func resources(m map[string]string) (sched.Resources, error) {
	var r sched.Resources
	var err error
	if v := m["mem"]; v != "" {
		if r.MemBytes, err = ParseSize(v); err != nil {
			return r, err
		}
	}
	if v := m["disk"]; v != "" {
		if r.DiskBytes, err = ParseSize(v); err != nil {
			return r, err
		}
	}
	r.CPUs = int64(atoi(m["cpu"]))
	return r, nil
}

func (s *Script) policy() []string {
	return render(s.H.Step(sched.PolicyChanged{Policy: s.pol}))
}

// render prints the verdict first, then the other actions sorted.
func render(acts []sched.Action) []string {
	var head, rest []string
	for _, a := range acts {
		if _, ok := a.(sched.Verdict); ok {
			head = append(head, a.String())
		} else {
			rest = append(rest, a.String())
		}
	}
	slices.Sort(rest)
	return append(head, rest...)
}

// Run executes one command line and returns its output lines.
func (s *Script) Run(line string) (out []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			pe, ok := r.(parseError)
			if !ok {
				panic(r)
			}
			out, err = nil, pe
		}
	}()
	if s.reports == nil {
		s.reports = map[sched.NodeID]sched.NodeReport{}
		s.inv = map[sched.RelayID]*sched.RelayInventory{}
		s.pol.Tenants = map[sched.TenantID]sched.TenantPolicy{}
		s.pol.ProductionRunners = map[sched.RunnerID]bool{}
	}
	f := strings.Fields(line)
	pos, m := kv(f[1:])
	arg := func(i int) string {
		if i < len(pos) {
			return pos[i]
		}
		return ""
	}
	step := func(ev sched.Event) ([]string, error) { return render(s.H.Step(ev)), nil }
	switch f[0] {
	case "policy":
		for k, v := range m {
			switch k {
			case "probe_limit":
				s.pol.ProbeLimit = atoi(v)
			case "burst":
				s.pol.ProductionProbeBurst = atoi(v)
			case "busy":
				s.pol.BusySecs = atoi(v)
			case "backoff_initial":
				s.pol.BackoffInitialSecs = atoi(v)
			case "backoff_max":
				s.pol.BackoffMaxSecs = atoi(v)
			case "lease":
				s.pol.LeaseSecs = atoi(v)
			case "renewals":
				s.pol.ClaimRenewals = atoi(v)
			case "pack":
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return nil, err
				}
				s.pol.PackAboveUtilization = f
			case "wide":
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return nil, err
				}
				s.pol.WideFraction = f
			case "drains":
				s.pol.DrainsPerPool = atoi(v)
			case "drain_hold":
				d, err := time.ParseDuration(v)
				if err != nil {
					return nil, err
				}
				s.pol.DrainMaxHold = d
			default:
				return nil, fmt.Errorf("unknown policy key %q", k)
			}
		}
		return s.policy(), nil
	case "tenant":
		tp := s.pol.Tenants[sched.TenantID(id(arg(0)))]
		tp.Weight, tp.Cap = atoi(m["weight"]), atoi(m["cap"])
		if v, ok := m["projects"]; ok {
			old := tp.Projects
			tp.Projects = map[string]sched.ProjectPolicy{}
			for _, p := range list(v) {
				tp.Projects[p] = old[p]
			}
		}
		s.pol.Tenants[sched.TenantID(id(arg(0)))] = tp
		return s.policy(), nil
	case "rule":
		tid := sched.TenantID(id(arg(0)))
		tp := s.pol.Tenants[tid]
		if tp.Projects == nil {
			tp.Projects = map[string]sched.ProjectPolicy{}
		}
		pp := tp.Projects[m["project"]]
		pp.Rules = append(slices.Clone(pp.Rules), sched.PlacementRule{Nodes: ids[sched.NodeID](m["nodes"]),
			Pools: list(m["pools"]), Branches: list(m["branches"])})
		tp.Projects[m["project"]] = pp
		s.pol.Tenants[tid] = tp
		return s.policy(), nil
	case "production":
		s.pol.ProductionRunners[sched.RunnerID(id(arg(0)))] = true
		return s.policy(), nil
	case "headroom":
		env, err := resources(m)
		if err != nil {
			return nil, err
		}
		s.pol.Headroom = append(s.pol.Headroom, sched.HeadroomEntry{
			Placement: sched.Placement{Pool: m["pool"], Labels: list(m["labels"]), Envelope: env}, Slots: atoi(m["slots"])})
		return s.policy(), nil
	case "node":
		n := sched.NodeID(id(arg(1)))
		switch arg(0) {
		case "add":
			env, err := resources(m)
			if err != nil {
				return nil, err
			}
			r := sched.NodeReport{Node: n, Capacity: env, Pools: list(m["pool"]), Labels: list(m["labels"]),
				MaxConcurrency: atoi(m["max"]), LocalRunner: slices.Contains(pos, "local")}
			if v := m["image_idle"]; v != "" {
				d, err := time.ParseDuration(v)
				if err != nil {
					return nil, err
				}
				r.ImageCacheIdle = d
			}
			switch m["state"] {
			case "", "ready":
			case "draining":
				r.State = sched.NodeDraining
			default:
				r.State = sched.NodeMaintenance
			}
			s.reports[n] = r
			return step(r)
		case "held":
			r := s.reports[n]
			r.Held = &sched.Held{Reservations: ids[sched.ReservationID](m["res"]), Jobs: ids[sched.JobID](m["jobs"])}
			return step(r)
		case "load":
			l, err := strconv.ParseFloat(arg(2), 64)
			if err != nil {
				return nil, err
			}
			return step(sched.NodeHeartbeat{Node: n, Load1: l, HasLoad: true})
		case "unreachable":
			return step(sched.NodeUnreachable{Node: n})
		case "lost":
			return step(sched.NodeLost{Node: n})
		}
	case "ceiling":
		if arg(1) == "zero" {
			return step(sched.CeilingSet{Node: sched.NodeID(id(arg(0))), Zero: true})
		}
		return step(sched.CeilingSet{Node: sched.NodeID(id(arg(0))), Ceiling: atoi(arg(1))})
	case "refused":
		return step(sched.SubmissionRefused{Admission: sched.AdmissionID(id(arg(0)))})
	case "canceljob":
		return step(sched.JobCancelled{Job: sched.JobID(id(arg(0)))})
	case "relay":
		rl := sched.RelayID(id(arg(1)))
		switch arg(0) {
		case "up":
			sess := uint64(len(s.H.Log) + 1)
			if v := m["session"]; v != "" {
				sess = uint64(atoi(v))
			}
			return step(sched.RelayUp{Relay: rl, Session: sess})
		case "down":
			return step(sched.RelayDown{Relay: rl})
		case "concurrent":
			inv := s.relayInv(rl)
			inv.Concurrent = atoi(arg(2))
			return step(*inv)
		}
	case "runner":
		env, err := resources(m)
		if err != nil {
			return nil, err
		}
		rl := sched.RelayID(id(m["relay"]))
		inv := s.relayInv(rl)
		ri := sched.RunnerInfo{Runner: sched.RunnerID(id(arg(0))), Tenant: sched.TenantID(id(m["tenant"])),
			Placement: sched.Placement{Pool: m["pool"], Labels: list(m["labels"]), Envelope: env},
			Limit:     atoi(m["limit"]), RequestConcurrency: 4}
		i := slices.IndexFunc(inv.Runners, func(x sched.RunnerInfo) bool { return x.Runner == ri.Runner })
		if i >= 0 {
			inv.Runners[i] = ri
		} else {
			inv.Runners = append(inv.Runners, ri)
		}
		return step(*inv)
	case "heartbeat":
		hb := sched.RelayHeartbeat{Relay: sched.RelayID(id(f[1]))}
		for _, tok := range f[2:] {
			k, v, ok := strings.Cut(tok, "=")
			if !ok {
				hb.Runners = append(hb.Runners, sched.RunnerBeat{Runner: sched.RunnerID(id(tok))})
				continue
			}
			if len(hb.Runners) == 0 {
				return nil, fmt.Errorf("heartbeat: %s before a runner", tok)
			}
			b := &hb.Runners[len(hb.Runners)-1]
			switch k {
			case "req":
				b.RequestAdmissions = ids[sched.AdmissionID](v)
			case "jobs":
				b.JobAdmissions = ids[sched.AdmissionID](v)
			case "unadmitted":
				b.UnadmittedJobs = atoi(v)
			}
		}
		return step(hb)
	case "queue":
		return step(sched.TicketQueued{Ticket: sched.TicketID(id(arg(0))), Runner: sched.RunnerID(id(arg(1)))})
	case "poll":
		return step(sched.TicketPolled{Ticket: sched.TicketID(id(arg(0)))})
	case "cancel":
		return step(sched.TicketCancelled{Ticket: sched.TicketID(id(arg(0)))})
	case "reply":
		e := sched.OfferReplied{Node: sched.NodeID(id(arg(0))), Reservation: sched.ReservationID(id(arg(1))),
			Accepted: arg(2) == "accept", LeaseSecs: atoi(m["lease"]), Reason: m["reason"]}
		return step(e)
	case "claim":
		return step(sched.Claimed{Admission: sched.AdmissionID(id(arg(0)))})
	case "outcome":
		k := map[string]sched.OutcomeKind{"job": sched.OutcomeJob, "empty": sched.OutcomeEmpty,
			"error": sched.OutcomeError, "released": sched.OutcomeReleased}[arg(1)]
		return step(sched.Outcome{Admission: sched.AdmissionID(id(arg(0))), Kind: k})
	case "renew":
		return step(sched.RenewRequested{Admission: sched.AdmissionID(id(arg(0)))})
	case "renewed":
		return step(sched.Renewed{Reservation: sched.ReservationID(id(arg(0))), RemainingSecs: atoi(arg(1))})
	case "release":
		return step(sched.Released{Admission: sched.AdmissionID(id(arg(0)))})
	case "gone":
		return step(sched.LeaseGone{Reservation: sched.ReservationID(id(arg(0))), Why: arg(1)})
	case "submit":
		e := sched.JobSubmitted{Job: sched.JobID(id(arg(0))), Runner: sched.RunnerID(id(arg(1))),
			Admission: sched.AdmissionID(id(m["adm"])), Reservation: sched.ReservationID(id(m["res"])),
			Project: m["project"], Ref: m["ref"], Legacy: slices.Contains(pos, "legacy"), Images: list(m["images"]),
			Name: m["name"]}
		if v := m["within"]; v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, err
			}
			e.PlaceWithin = d
		}
		return step(e)
	case "started":
		return step(sched.JobStartReplied{Job: sched.JobID(id(arg(0))), Node: sched.NodeID(id(arg(1))), Accepted: arg(2) == "accept"})
	case "finish":
		e := sched.JobFinished{Job: sched.JobID(id(arg(0))), Name: m["name"]}
		if v := m["wall"]; v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, err
			}
			e.Wall = d
		}
		return step(e)
	case "drain":
		return step(sched.DrainReserve{Node: sched.NodeID(id(arg(0))), Job: sched.JobID(id(arg(1)))})
	case "stats":
		st := s.H.Core.RuntimeStats(arg(0))
		return []string{fmt.Sprintf("count=%d total=%s longest=%s buckets=%v", st.Count, st.Total, st.Longest, st.Buckets)}, nil
	case "settle":
		return step(sched.JobSettled{Job: sched.JobID(id(arg(0)))})
	case "tick":
		d := time.Duration(0)
		if a := arg(0); a != "" {
			var err error
			if d, err = time.ParseDuration(strings.TrimPrefix(a, "+")); err != nil {
				return nil, err
			}
		}
		return render(s.H.Advance(d)), nil
	case "restore":
		env, err := resources(m)
		if err != nil {
			return nil, err
		}
		ra := sched.RestoredAdmission{Admission: sched.AdmissionID(id(m["adm"])), Reservation: sched.ReservationID(id(m["res"])),
			Node: sched.NodeID(id(m["node"])), Runner: sched.RunnerID(id(m["runner"])), Tenant: sched.TenantID(id(m["tenant"])),
			Relay: sched.RelayID(id(m["relay"])), Placement: sched.Placement{Envelope: env}}
		return step(sched.Restore{Admissions: []sched.RestoredAdmission{ra}, NextID: uint64(atoi(m["next"]))})
	case "reasons":
		return s.reasons(), nil
	case "fits":
		env, err := resources(m)
		if err != nil {
			return nil, err
		}
		return []string{fmt.Sprint(s.H.Core.Fits(sched.Placement{Pool: m["pool"], Labels: list(m["labels"]), Envelope: env}))}, nil
	case "held":
		return []string{fmt.Sprint(s.H.Core.Held(sched.TenantID(id(arg(0)))))}, nil
	case "state":
		return s.state(arg(0)), nil
	case "immediate":
		v, ok := s.H.Core.Ticket(sched.TicketID(id(arg(0))))
		return []string{fmt.Sprintf("%v %v", v.Immediate, ok)}, nil
	case "drains":
		var out []string
		for _, n := range s.H.Core.Nodes() {
			switch {
			case n.DrainJob != 0:
				out = append(out, fmt.Sprintf("n%d drained for j%d", n.ID, n.DrainJob))
			case n.DrainFor != "":
				out = append(out, fmt.Sprintf("n%d drained for %s", n.ID, n.DrainFor))
			}
		}
		return out, nil
	case "util":
		return []string{fmt.Sprintf("%.3f", s.H.Core.Utilization(arg(0)))}, nil
	case "share":
		return []string{fmt.Sprintf("%.4f", s.H.Core.Share(sched.TenantID(id(arg(0))), m["pool"]))}, nil
	case "ranked":
		env, err := resources(m)
		if err != nil {
			return nil, err
		}
		snap := s.H.Core.Snapshot()
		var out []string
		ok := snap.Ranked(sched.Placement{Pool: m["pool"], Labels: list(m["labels"]), Envelope: env}, func(r sched.RankedNode) bool {
			out = append(out, fmt.Sprintf("n%d load=%.3f room=%d", r.ID, r.Load, r.Room))
			return true
		})
		if !ok {
			out = append(out, "no such placement")
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown command %q", line)
}

func (s *Script) relayInv(rl sched.RelayID) *sched.RelayInventory {
	inv := s.inv[rl]
	if inv == nil {
		inv = &sched.RelayInventory{Relay: rl}
		s.inv[rl] = inv
	}
	return inv
}

func (s *Script) reasons() []string {
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

func (s *Script) state(name string) []string {
	c := s.H.Core
	switch name[0] {
	case 't':
		v, ok := c.Ticket(sched.TicketID(id(name)))
		if !ok {
			return []string{"gone"}
		}
		if v.Grant != nil {
			return []string{v.State + " " + v.Grant.String()}
		}
		return []string{v.State}
	case 'a':
		st, oc, ok := c.AdmissionState(sched.AdmissionID(id(name)))
		if !ok {
			return []string{"unknown"}
		}
		return []string{st + " outcome=" + oc.String()}
	case 'j':
		v, ok := c.Job(sched.JobID(id(name)))
		if !ok {
			return []string{"unknown"}
		}
		return []string{fmt.Sprintf("%s n%d", v.State, v.Node)}
	}
	return []string{"?"}
}
