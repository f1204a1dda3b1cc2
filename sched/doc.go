// Package sched is vk's scheduling core: the hub's fleet-wide arbiter
// (which waiting reservation request or queued job gets room next) and its
// placement (which node). It is a pure, deterministic state machine: a
// [Core] takes events with the time they happened ([Core.Step]) and returns
// actions for its driver to carry out. It performs no I/O, reads no clock,
// starts no goroutines and does not log; the hub (hub/driver.go) and the
// simulator (sim) are its two drivers and feed it the same events.
//
// The same policy, seed and sequence of (time, event) pairs give the same
// actions byte for byte. The only randomness, the ±25 % backoff jitter, comes
// from a PCG generator seeded in [New] and held in the Core.
//
// Identity is compact: nodes, tenants, runners and relays are uint32 IDs,
// tickets and jobs uint64 IDs, all minted by the driver (which maps its own
// wire strings to them). Reservation and admission IDs are minted by the
// Core, from one counter the driver may raise after a restart
// ([Restore].NextID).
//
// Decisions cost index look-ups, not scans: each placement keeps its waiting
// requests per class in a B-tree of tenants ordered by weighted dominant
// share (DECISIONS 13) then age, one pass compares the heads of the
// placements competing for freed room, and its nodes with room in a B-tree ordered by load, then most
// room, then node ID (github.com/tidwall/btree). Deadlines (offer answers,
// leases, ticket idleness, backoff, place_within) are data in one ordered
// set, fired by every Step.
//
// Wide jobs (BS-20..25) are served by default, by packing while wide work
// waits (or above a pool utilization) and by drain reservations, one per
// waiting wide request, on the node predicted, from per-job-name
// runtime statistics, to empty first; nothing is ever preempted. Readers on
// other goroutines get point-in-time views through [Core.Snapshot], cloned
// copy-on-write from the node indexes (BS-05).
//
// Inside, a placementQueue is one placement's arbitration queue and node
// index; a tenantQ is one tenant's waiters in one class of it; a waiter is
// a ticket or a queued job in line; a node's queues are the placement
// queues whose labels it has, with its entry in each one's index, and its
// headroomEntries the headroom entries it counts towards. A job keeps its
// place_within deadline until its node accepts it and its start time from
// then on in one slot, read through placeBy and startedAt.
//
// See README.md in this directory for the pipeline, the vocabulary (ticket,
// offer, grant, claim, admission, reservation, envelope, lease), the state
// diagrams, the scenario language of testdata/*.txt and the choices made
// where the spec is silent.
package sched
