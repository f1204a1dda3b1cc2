// Package replay turns a hub workload trace (hub/wtrace) into a simulator
// workload and runs it with the real scheduling core under the capacity
// policy that was in force and under a candidate, side by side (BS-18,
// docs/replay.md): `vk-sim replay` and `vk-hub capacity-policy set
// --dry-run`.
//
// A job's arrival at GitLab is its answer's time less the time in queue
// GitLab's job response gave (the trace's queue record). What a trace
// cannot say is estimated, the same way for the trace's own measures and
// for the replay, so the two compare like with like:
//   - the arrival of a job without a queue record (a trace of an older
//     hub or relay): the hub sees only its runner's requests. A job
//     handed out after GitLab held the request (long polling, an answer
//     at least [HeldAnswer] after the ask) arrived at the answer; a job
//     handed out at once arrived at the later of the demand (the ticket
//     that led to the request) and the runner's last empty answer.
//   - GitLab's hidden backlog: the jobs still pending for a runner when
//     the trace ends, which no hub record names. A runner's last queue
//     record says how many jobs it could take then; those beyond the one
//     it took and the ones it took later are hidden jobs, arriving evenly
//     between the taken job's arrival and its answer (GitLab hands out
//     the oldest first, so they came after it), running as long as the
//     runner's recorded jobs in turn. A candidate policy may serve them
//     within the window; the policy in force, like the trace, did not.
//   - a job that did not end within the trace ran until its end.
package replay

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"time"

	"github.com/vk-ci/vk/hub/wtrace"
	"github.com/vk-ci/vk/sched"
)

// HeldAnswer: an answer this long after its ask was held by GitLab's long
// polling, so its job arrived while it was held.
const HeldAnswer = 2 * time.Second

// Workload is what a trace recorded, in the form a replay needs.
type Workload struct {
	Start, End time.Time // the trace's window
	// Policy is the capacity policy in force at the end of the window,
	// the one a replay applies; PolicyChanges counts the changes within
	// the window (a replay cannot apply them at their times).
	Policy        *wtrace.Policy
	PolicyChanges int
	Runners       []Runner // by ID
	Nodes         []Node   // by ID
	Jobs          []Job    // by arrival, then ID
	// Asks and Empty are the GitLab job requests the relays made and the
	// empty answers among them; Dropped the records the hub dropped.
	Asks, Empty int
	Dropped     int64
	// RoundTrip is the median time of GitLab's immediate answers; LongPoll
	// the longest hold of an empty answer (0: no long polling seen).
	RoundTrip, LongPoll time.Duration
	// Unstarted and Censored count jobs that did not start, and that did
	// not end, within the window (hidden jobs among the unstarted).
	Unstarted, Censored int
	// Queued counts the recorded jobs whose arrival came from GitLab's
	// time in queue (the others' is estimated); Hidden the jobs of
	// GitLab's hidden backlog at the end (in Jobs, never started).
	Queued, Hidden int
}

// MaxHidden bounds the hidden backlog a trace adds, over all runners: a
// queue record is the relay's word.
const MaxHidden = 100_000

// Runner is one runner as its relay's inventory said it.
type Runner struct {
	ID, Tenant uint64
	Pool       string
	Envelope   sched.Resources
	Conc       int
	Production bool
}

// Node is one node: its capacity and when it was ready to take work.
type Node struct {
	ID       uint64
	Capacity sched.Resources
	Pool     string
	MaxConc  int
	// Ready are the node's changes of readiness, in order, from the
	// window's start (a node first reported later is not ready before).
	Ready []Readiness
}

// Readiness is a node's readiness from At on.
type Readiness struct {
	At    time.Duration
	Ready bool
}

// Job is one recorded job.
type Job struct {
	ID       uint64
	Runner   uint64
	Name     string
	Arrive   time.Duration // estimated arrival at GitLab, from the window's start
	Start    time.Duration // -1: did not start within the window
	Runtime  time.Duration // once started
	Reason   string        // how it ended ("finished", a failure, "" when it did not end)
	Censored bool          // did not end within the window
	Hidden   bool          // GitLab's hidden backlog: pending at the end, never handed out
}

type jobFacts struct {
	submit, start, end, queue *wtrace.Record
}

// scan is FromTrace's state while it reads the records.
type scan struct {
	w            *Workload
	start, end   int64
	runners      map[uint64]*Runner
	nodes        map[uint64]*Node
	demand       map[uint64]int64   // ticket → demand time
	ticketRunner map[uint64]uint64  // ticket → runner
	admTicket    map[uint64]uint64  // admission → ticket
	ask, answer  map[uint64]int64   // admission → ask time, answer time (with a job)
	lastEmpty    map[uint64][]int64 // runner → its empty answers' times
	jobs         map[uint64]*jobFacts
	rts, holds   []time.Duration // quick answers; empty answers after a hold
}

func (sc *scan) off(t int64) time.Duration { return time.Duration(t-sc.start) * time.Millisecond }

// FromTrace builds the workload of a decoded trace.
func FromTrace(h wtrace.Header, recs []wtrace.Record) (*Workload, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("replay: the trace has no records")
	}
	start := h.Start
	end := start
	for i := range recs {
		start = min(start, recs[i].T)
		end = max(end, recs[i].T)
	}
	if h.Start > 0 {
		start = max(start, h.Start) // the jobs open at an export's cut begin before it
	}
	w := &Workload{Start: time.UnixMilli(start).UTC(), End: time.UnixMilli(end).UTC()}
	sc := &scan{w: w, start: start, end: end, runners: map[uint64]*Runner{}, nodes: map[uint64]*Node{},
		demand: map[uint64]int64{}, ticketRunner: map[uint64]uint64{}, admTicket: map[uint64]uint64{},
		ask: map[uint64]int64{}, answer: map[uint64]int64{}, lastEmpty: map[uint64][]int64{}, jobs: map[uint64]*jobFacts{}}
	for i := range recs {
		sc.record(&recs[i])
	}
	for _, ts := range sc.lastEmpty {
		slices.Sort(ts)
	}
	w.RoundTrip, w.LongPoll = gitlabTimes(sc.rts, sc.holds)
	if w.Policy == nil {
		w.Policy = &wtrace.Policy{}
	}
	for _, p := range w.Policy.Production {
		if r := sc.runners[p]; r != nil {
			r.Production = true
		}
	}
	for _, id := range sortedIDs(sc.runners) {
		w.Runners = append(w.Runners, *sc.runners[id])
	}
	for _, id := range sortedIDs(sc.nodes) {
		w.Nodes = append(w.Nodes, *sc.nodes[id])
	}
	for _, id := range sortedIDs(sc.jobs) {
		if j, ok := sc.job(id, sc.jobs[id]); ok {
			w.Jobs = append(w.Jobs, j)
		}
	}
	sc.takeOrder()
	sc.hiddenBacklog()
	slices.SortStableFunc(w.Jobs, func(a, b Job) int { return cmp.Or(cmp.Compare(a.Arrive, b.Arrive), cmp.Compare(a.ID, b.ID)) })
	return w, nil
}

// TakeOrderSlack is how far a job's arrival may fall before that of a
// job its runner took earlier and still count as noise: the answer time an
// arrival is counted back from is the hub's, a message after GitLab's, and
// that message's latency varies job to job.
const TakeOrderSlack = time.Second

// takeOrder keeps each runner's arrivals in the order the runner took its
// jobs: GitLab hands a runner the oldest job it may take (BS-26), so a job
// taken later that seems to have arrived earlier, by less than
// [TakeOrderSlack], arrived with the one before it. Without this the
// replay would hand out jobs that reached GitLab together (one pipeline's)
// in the order of that noise, each with its own recorded runtime: another
// sequence of runtimes than the trace's. A larger inversion is real (an
// instance runner's fair-usage order) and stays.
func (sc *scan) takeOrder() {
	byRunner := map[uint64][]int{}
	for i, j := range sc.w.Jobs {
		byRunner[j.Runner] = append(byRunner[j.Runner], i)
	}
	for _, rn := range sortedIDs(byRunner) {
		idx := byRunner[rn]
		slices.SortStableFunc(idx, func(a, b int) int {
			fa, fb := sc.jobs[sc.w.Jobs[a].ID].submit, sc.jobs[sc.w.Jobs[b].ID].submit
			return cmp.Or(cmp.Compare(fa.T, fb.T), cmp.Compare(fa.Job, fb.Job))
		})
		for k := 1; k < len(idx); k++ {
			prev, j := sc.w.Jobs[idx[k-1]].Arrive, &sc.w.Jobs[idx[k]]
			if j.Arrive < prev && prev-j.Arrive < TakeOrderSlack {
				j.Arrive = prev
			}
		}
	}
}

// hiddenBacklog adds the jobs GitLab still held for each runner at its
// last queue record beyond those the trace names (see the package
// documentation).
func (sc *scan) hiddenBacklog() {
	w := sc.w
	last := map[uint64]*jobFacts{} // runner → the job of its latest queue record
	var maxID uint64
	for id, f := range sc.jobs {
		maxID = max(maxID, id)
		if q := f.queue; q != nil {
			if l := last[q.Runner]; l == nil || q.T > l.queue.T || q.T == l.queue.T && q.Job > l.queue.Job {
				last[q.Runner] = f
			}
		}
	}
	byRunner := map[uint64][]Job{}
	for _, j := range w.Jobs {
		byRunner[j.Runner] = append(byRunner[j.Runner], j)
	}
	for _, rn := range sortedIDs(last) {
		q := last[rn].queue
		var taken *Job
		later := 0
		var runtimes []time.Duration
		for i, j := range byRunner[rn] {
			if j.ID == q.Job {
				taken = &byRunner[rn][i]
			}
			if f := sc.jobs[j.ID]; f.submit.T > q.T || f.submit.T == q.T && j.ID > q.Job {
				later++
			}
			if j.Start >= 0 && !j.Censored {
				runtimes = append(runtimes, j.Runtime)
			}
		}
		n := min(q.Pending-1-int64(later), int64(MaxHidden-w.Hidden))
		if taken == nil || n <= 0 || len(runtimes) == 0 {
			continue
		}
		lo, hi := taken.Arrive, sc.off(q.T)
		for k := range n {
			maxID++
			w.Jobs = append(w.Jobs, Job{ID: maxID, Runner: rn, Name: taken.Name, Start: -1, Hidden: true,
				Arrive:  lo + time.Duration(int64(hi-lo)*(k+1)/n),
				Runtime: runtimes[int(k)%len(runtimes)]})
			w.Hidden++
			w.Unstarted++
		}
	}
}

// record takes in one record.
func (sc *scan) record(r *wtrace.Record) {
	w := sc.w
	switch r.K {
	case wtrace.KindPolicy:
		if w.Policy != nil && r.T > sc.start && !reflect.DeepEqual(w.Policy, r.Policy) {
			w.PolicyChanges++ // the hub restates it as relays report runners
		}
		w.Policy = r.Policy
	case wtrace.KindRunner:
		sc.runners[r.Runner] = &Runner{ID: r.Runner, Tenant: r.Tenant, Pool: r.Pool, Conc: r.Conc,
			Envelope: sched.Resources{CPUs: r.CPUs, MemBytes: r.Mem, DiskBytes: r.Disk}}
	case wtrace.KindNode:
		n := sc.nodes[r.Node]
		if n == nil {
			n = &Node{ID: r.Node}
			sc.nodes[r.Node] = n
		}
		n.Capacity, n.Pool, n.MaxConc = sched.Resources{CPUs: r.CPUs, MemBytes: r.Mem, DiskBytes: r.Disk}, r.Pool, r.Conc
		n.setReady(max(sc.off(r.T), 0), r.State == "ready")
	case wtrace.KindNodeGone:
		if n := sc.nodes[r.Node]; n != nil {
			n.setReady(max(sc.off(r.T), 0), false)
		}
	case wtrace.KindDemand:
		sc.demand[r.Ticket] = r.T
		sc.ticketRunner[r.Ticket] = r.Runner
	case wtrace.KindGrant:
		sc.admTicket[r.Adm] = r.Ticket
	case wtrace.KindAsk:
		sc.ask[r.Adm] = r.T
		if r.T >= sc.start {
			w.Asks++
		}
	case wtrace.KindAnswer:
		sc.answered(r)
	case wtrace.KindSubmit:
		sc.jobs[r.Job] = &jobFacts{submit: r}
	case wtrace.KindStart:
		if f := sc.jobs[r.Job]; f != nil {
			f.start = r
		}
	case wtrace.KindEnd:
		if f := sc.jobs[r.Job]; f != nil && f.end == nil {
			f.end = r
		}
	case wtrace.KindQueue:
		if f := sc.jobs[r.Job]; f != nil {
			f.queue = r
		}
	case wtrace.KindDrop:
		w.Dropped += r.N
	}
}

// answered takes in GitLab's answer to a request.
func (sc *scan) answered(r *wtrace.Record) {
	a, asked := sc.ask[r.Adm]
	took := time.Duration(r.T-a) * time.Millisecond
	if r.OK {
		sc.answer[r.Adm] = r.T
	} else if r.T >= sc.start {
		sc.w.Empty++
	}
	switch {
	case !asked:
	case took < HeldAnswer:
		sc.rts = append(sc.rts, took)
	case !r.OK:
		sc.holds = append(sc.holds, took)
	}
	if rn, ok := sc.ticketRunner[sc.admTicket[r.Adm]]; ok && !r.OK {
		sc.lastEmpty[rn] = append(sc.lastEmpty[rn], r.T)
	}
}

// job is one recorded job with its estimated arrival; false for a job the
// replay leaves out (no runner inventory, or ended without starting).
func (sc *scan) job(id uint64, f *jobFacts) (Job, bool) {
	w := sc.w
	if sc.runners[f.submit.Runner] == nil {
		return Job{}, false // a runner no inventory named: no envelope
	}
	adm := f.submit.Adm
	j := Job{ID: id, Runner: f.submit.Runner, Name: f.submit.Name, Start: -1}
	a, asked := sc.ask[adm]
	ans, answered := sc.answer[adm]
	if !answered {
		ans = f.submit.T
	}
	if !asked {
		a = ans
	}
	back := (w.RoundTrip / 2).Milliseconds()
	arrive := ans - back // held: it arrived as the answer left GitLab
	if time.Duration(ans-a)*time.Millisecond < HeldAnswer {
		// at once: between the later of the demand and the runner's last
		// empty answer, and the request reaching GitLab; the midpoint
		lo := a
		if d, ok := sc.demand[sc.admTicket[adm]]; ok {
			lo = d
		}
		lo = max(lo, lastBefore(sc.lastEmpty[f.submit.Runner], a))
		arrive = lo + (a+back-lo)/2
	}
	if q := f.queue; q != nil {
		if !answered {
			ans = q.T
		}
		arrive = ans - q.Queued // GitLab's word
		w.Queued++
	}
	j.Arrive = sc.off(arrive)
	if f.start != nil {
		j.Start = sc.off(f.start.T)
		switch {
		case f.end != nil && f.end.Wall > 0:
			// the node's wall time, or the hub's start-to-end when longer:
			// the job held its room that long (checkout, the result's way)
			j.Runtime = time.Duration(max(f.end.Wall, f.end.T-f.start.T)) * time.Millisecond
		case f.end != nil:
			j.Runtime = time.Duration(f.end.T-f.start.T) * time.Millisecond
		default:
			j.Runtime, j.Censored = time.Duration(sc.end-f.start.T)*time.Millisecond, true
			w.Censored++
		}
	} else {
		w.Unstarted++
	}
	if f.end != nil {
		j.Reason = f.end.Reason
	}
	// a job that ended without starting (lost, refused) is not replayed
	return j, j.Start >= 0 || f.end == nil
}

// gitlabTimes estimates GitLab's round trip and long poll. With long
// polling an empty answer after a hold either ran the whole poll (whole
// seconds, as Workhorse is configured, plus a round trip) or ended early,
// when a job was queued for the runner (Workhorse answers a held request
// 204 then): the long poll is the cluster of the longest holds, those
// within 2 s of the longest, whose median splits into the poll and
// a round trip. Without long polling the round trip is the median answer.
func gitlabTimes(quick, holds []time.Duration) (rt, longPoll time.Duration) {
	med := func(v []time.Duration) time.Duration {
		slices.Sort(v)
		return v[len(v)/2]
	}
	if len(holds) > 0 {
		slices.Sort(holds)
		top := holds[len(holds)-1]
		i, _ := slices.BinarySearch(holds, top-2*time.Second)
		m := med(holds[i:])
		longPoll = m.Truncate(time.Second)
		rt = m - longPoll
	}
	if rt <= 0 && len(quick) > 0 {
		rt = med(quick)
	}
	return rt, longPoll
}

// lastBefore is the latest of ts (sorted) at or before t, or -1<<62.
func lastBefore(ts []int64, t int64) int64 {
	i := sort.Search(len(ts), func(i int) bool { return ts[i] > t })
	if i == 0 {
		return -1 << 62
	}
	return ts[i-1]
}

func (n *Node) setReady(at time.Duration, ready bool) {
	if len(n.Ready) > 0 && n.Ready[len(n.Ready)-1].Ready == ready {
		return
	}
	if len(n.Ready) > 0 && n.Ready[len(n.Ready)-1].At == at {
		n.Ready[len(n.Ready)-1].Ready = ready
		return
	}
	n.Ready = append(n.Ready, Readiness{At: at, Ready: ready})
}

func sortedIDs[V any](m map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
