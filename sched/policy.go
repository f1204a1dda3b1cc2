package sched

import (
	"errors"
	"path"
	"strconv"
	"time"
)

// Policy is the hub's capacity policy as the Core uses it (DECISIONS 11). The
// zero value is usable: [Policy.withDefaults] fills every unset number with
// the spec's default.
type Policy struct {
	// Tenants maps a tenant to its weight, cap and projects. A tenant absent
	// here has weight 1 and no cap.
	Tenants map[TenantID]TenantPolicy
	// ProductionRunners marks runners whose tickets are production work.
	ProductionRunners map[RunnerID]bool
	// Headroom entries reserve room for production work (ARB-14..17); at
	// most [MaxHeadroom].
	Headroom []HeadroomEntry

	// BusySecs: a runner that took no job within this many seconds makes
	// probes (ARB-18). Default 60.
	BusySecs int
	// ProbeLimit: probes outstanding fleet-wide (ARB-19). Default 16
	// (DECISIONS 14: the spec's 1 made idle runners take turns, so after an
	// idle spell a job waited about a round trip per idle runner); a
	// negative value means no probe may be outstanding.
	ProbeLimit int
	// BackoffInitialSecs and BackoffMaxSecs bound the empty/error backoff
	// (ARB-20). Defaults 1 and 60.
	BackoffInitialSecs int
	BackoffMaxSecs     int
	// ProductionProbeBurst: production probes granted before normal work is
	// owed a turn (ARB-07). Default 1.
	ProductionProbeBurst int

	// LeaseSecs is the lease asked of nodes in offers (ARB-28). Default 90.
	LeaseSecs int
	// OfferTimeout: an offer unanswered this long counts as refused (ARB-23).
	// Default 5 s.
	OfferTimeout time.Duration
	// RetryAfterAllTried: a request that every fitting node refused is
	// retried this much later (ARB-23). Default 2 s.
	RetryAfterAllTried time.Duration
	// TicketIdle: an unclaimed ticket not polled this long expires (ARB-03).
	// Default 120 s.
	TicketIdle time.Duration
	// RelayTicketLimit and TicketLimit bound unended reservations per relay
	// and hub-wide (API-20): live tickets, claimed ones included until
	// their admission ends or becomes a job, plus restored admissions.
	// Past them TicketQueued answers unavailable.
	// Defaults 256 and 4096. (A runner's own bound is its
	// request_concurrency.)
	RelayTicketLimit int
	TicketLimit      int

	// ImageAffinityMaxLoad and ImageAffinityMaxExtraLoad bound image
	// affinity (PLACE-16, PLACE-17). Defaults 0.7 and 0.25.
	ImageAffinityMaxLoad      float64
	ImageAffinityMaxExtraLoad float64

	// ClaimGrace: a claimed admission a heartbeat of its session lists in
	// neither list is reclaimed only when claimed at least this long before
	// the heartbeat (ARB-39). Default 10 s.
	ClaimGrace time.Duration

	// ClaimRenewals bounds the renewals an admission may ask before its
	// outcome (ARB-32: a claimed grant covers one job request plus one
	// renewal, so the spec's value is 1); a renewal past it answers
	// conflict (409) and leaves the reservation to its lease. 0 (the
	// default) means no bound, as before this field existed.
	ClaimRenewals int

	// PackAboveUtilization (BS-21): while wide work of a pool waits for a
	// node, and whenever the utilization of the pool (the larger of its
	// used fraction of vCPUs and of memory over its ready, reachable nodes)
	// is at least this fraction, work is placed on the most loaded node
	// with room first (best fit, so whole nodes free up); otherwise on the
	// least loaded (PLACE-11). Default 0.7 (seed 003's value); a negative
	// value packs only while wide work waits.
	PackAboveUtilization float64

	// DrainsPerPool bounds the automatic drain reservations (BS-22) a pool
	// holds at once. When the first waiter of a placement finds no node
	// with room and its envelope is wide on some node of the pool (see
	// WideFraction), the node predicted to empty first (BS-23, BS-24) takes
	// no new work until a waiter of the placement fits there; a placement
	// holds at most one drain per waiting request, so the drains follow
	// the wide demand and end with it. 0 (the default) bounds a pool at a
	// quarter of its serving nodes (at least one); a negative value places
	// none (only [DrainReserve] events mark nodes).
	DrainsPerPool int
	// WideFraction: an envelope is wide on a node when it takes at least
	// this fraction of the node's vCPUs or memory (BS-20); only such nodes
	// are drained for it. Default 0.5.
	WideFraction float64
	// DrainMaxHold: an automatic drain held this long is lifted and chosen
	// again from fresh predictions (it may land on the same node). Default
	// 15 minutes.
	DrainMaxHold time.Duration
	// FairDrainMaxWait bounds fairness drains (DECISIONS 13): when a
	// tenant over the share of another is about to take room while that
	// other tenant's work, not wide, finds no node with room, the node
	// predicted to fit it soonest is held for it, but only when the fit
	// is predicted within this long, and never longer. Default 5 minutes;
	// a negative value places no fairness drains.
	FairDrainMaxWait time.Duration
}

// TenantPolicy is one tenant's share of the fleet.
type TenantPolicy struct {
	// Weight scales the tenant's fair share (ARB-09); 0 means 1.
	Weight int
	// Cap bounds what the tenant holds (ARB-11); 0 means no cap.
	Cap int
	// Projects lists the tenant's projects. Nil means the tenant lists
	// every project (no project check); a non-nil list makes a relay job of
	// an unlisted project wait (ARB-41).
	Projects map[string]ProjectPolicy
}

// ProjectPolicy is a project entry of a tenant.
type ProjectPolicy struct {
	// Production marks the project's jobs as production work.
	Production bool
	// Rules restrict where the project's jobs may go (PLACE-19..24); at most
	// [MaxPlacementRules].
	Rules []PlacementRule
}

// PlacementRule is one placement rule of a project (PLACE-19/20).
type PlacementRule struct {
	// Nodes lists node IDs the rule allows; empty means any node.
	Nodes []NodeID
	// Pools lists pools one of which the node must be in; empty means any.
	Pools []string
	// Branches, when non-empty, limits the rule to jobs whose ref matches
	// one of these globs (path.Match syntax).
	Branches []string
}

// HeadroomEntry reserves Slots envelopes of Placement for production work.
type HeadroomEntry struct {
	Placement Placement
	Slots     int
}

// Limits of the policy (ARB-14, PLACE-19).
const (
	MaxHeadroom         = 64
	MaxPlacementRules   = 64
	MaxRuleNodesOrPools = 256
)

// ErrInvalidPolicy is returned (wrapped) by [Policy.Validate].
var ErrInvalidPolicy = errors.New("sched: invalid capacity policy")

// Validate reports every way p breaks the policy limits, joined, each
// wrapping [ErrInvalidPolicy].
func (p Policy) Validate() error {
	var errs []error
	bad := func(msg string) { errs = append(errs, &policyError{msg}) }
	itoa := strconv.Itoa
	if len(p.Headroom) > MaxHeadroom {
		bad(itoa(len(p.Headroom)) + " headroom entries, at most " + itoa(MaxHeadroom))
	}
	if p.PackAboveUtilization > 1 || p.WideFraction < 0 || p.WideFraction > 1 {
		bad("pack_above_utilization is at most 1 and wide_fraction a fraction in [0, 1]")
	}
	if p.ClaimRenewals < 0 || p.DrainMaxHold < 0 {
		bad("negative claim_renewals or drain_max_hold")
	}
	for i, h := range p.Headroom {
		if h.Slots < 0 {
			bad("headroom[" + itoa(i) + "]: negative slots")
		}
	}
	for _, tid := range sortedKeys(p.Tenants) {
		t := p.Tenants[tid]
		tn := "tenant " + u(tid)
		if t.Weight < 0 || t.Cap < 0 {
			bad(tn + ": negative weight or cap")
		}
		for _, name := range sortedKeys(t.Projects) {
			pr := t.Projects[name]
			pn := tn + " project " + strconv.Quote(name)
			if len(pr.Rules) > MaxPlacementRules {
				bad(pn + ": " + itoa(len(pr.Rules)) + " placement rules, at most " + itoa(MaxPlacementRules))
			}
			for i, r := range pr.Rules {
				if len(r.Nodes) > MaxRuleNodesOrPools || len(r.Pools) > MaxRuleNodesOrPools {
					bad(pn + " rule " + itoa(i) + ": more than " + itoa(MaxRuleNodesOrPools) + " nodes or pools")
				}
				for _, g := range r.Branches {
					if _, err := path.Match(g, ""); err != nil {
						bad(pn + " rule " + itoa(i) + ": bad branch glob " + strconv.Quote(g))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// withDefaults returns p with every unset number set to its default.
func (p Policy) withDefaults() Policy {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&p.BusySecs, 60)
	def(&p.ProbeLimit, 16)
	def(&p.BackoffInitialSecs, 1)
	def(&p.BackoffMaxSecs, 60)
	def(&p.ProductionProbeBurst, 1)
	def(&p.LeaseSecs, 90)
	def(&p.RelayTicketLimit, 256)
	def(&p.TicketLimit, 4096)
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defd(&p.OfferTimeout, 5*time.Second)
	defd(&p.RetryAfterAllTried, 2*time.Second)
	defd(&p.TicketIdle, 120*time.Second)
	defd(&p.ClaimGrace, 10*time.Second)
	if p.ImageAffinityMaxLoad == 0 {
		p.ImageAffinityMaxLoad = 0.7
	}
	if p.ImageAffinityMaxExtraLoad == 0 {
		p.ImageAffinityMaxExtraLoad = 0.25
	}
	if p.WideFraction <= 0 {
		p.WideFraction = 0.5
	}
	defd(&p.DrainMaxHold, 15*time.Minute)
	defd(&p.FairDrainMaxWait, 5*time.Minute)
	p.ClaimRenewals = max(p.ClaimRenewals, 0)
	if p.PackAboveUtilization == 0 {
		p.PackAboveUtilization = 0.7
	}
	if p.ProbeLimit < 0 {
		p.ProbeLimit = 0
	}
	return p
}

// tenantWeight returns the tenant's weight (default 1).
func (p *Policy) tenantWeight(t TenantID) int64 {
	if tp, ok := p.Tenants[t]; ok && tp.Weight > 0 {
		return int64(tp.Weight)
	}
	return 1
}

// tenantCap returns the tenant's cap, 0 meaning none.
func (p *Policy) tenantCap(t TenantID) int {
	return p.Tenants[t].Cap
}

// project returns the project's policy and whether the tenant lists it.
// A tenant without a project list lists everything.
func (p *Policy) project(t TenantID, name string) (ProjectPolicy, bool) {
	tp, ok := p.Tenants[t]
	if !ok || tp.Projects == nil {
		return ProjectPolicy{}, true
	}
	pp, ok := tp.Projects[name]
	return pp, ok
}

// ruleAllows reports whether every applicable rule allows node n for ref.
func rulesAllow(rules []PlacementRule, ref string, id NodeID, pools []string) bool {
	for _, r := range rules {
		if len(r.Branches) > 0 {
			match := false
			for _, g := range r.Branches {
				if ok, _ := path.Match(g, ref); ok {
					match = true
					break
				}
			}
			if !match {
				continue
			}
		}
		if len(r.Nodes) > 0 {
			found := false
			for _, n := range r.Nodes {
				if n == id {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
		if len(r.Pools) > 0 {
			found := false
			for _, p := range r.Pools {
				for _, q := range pools {
					if p == q {
						found = true
					}
				}
			}
			if !found {
				return false
			}
		}
	}
	return true
}

// policyError is one policy problem; it matches [ErrInvalidPolicy].
type policyError struct{ msg string }

func (e *policyError) Error() string { return ErrInvalidPolicy.Error() + ": " + e.msg }
func (e *policyError) Unwrap() error { return ErrInvalidPolicy }
