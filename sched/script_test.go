package sched_test

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/vk-ci/vk/sched/schedtest"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/*.txt with actual outputs")

func runScript(t *testing.T, name string) {
	t.Helper()
	schedtest.RunScript(t, filepath.Join("testdata", name), *rewrite)
}

// spec: ARB-22, ARB-24, ARB-26, ARB-35, ARB-36, API-26
func TestScriptBasicFlow(t *testing.T) { runScript(t, "basic_flow.txt") }

// spec: ARB-05, ARB-06
func TestScriptClassOrder(t *testing.T) { runScript(t, "arb_06_class_order.txt") }

// spec: ARB-07, ARB-08
func TestScriptProbeBurst(t *testing.T) { runScript(t, "arb_07_probe_burst.txt") }

// spec: ARB-09, ARB-10
func TestScriptFairShare(t *testing.T) { runScript(t, "arb_09_fair_share.txt") }

// spec: ARB-05, ARB-09, BS-28
func TestScriptFairShareAcrossEnvelopes(t *testing.T) { runScript(t, "arb_09_drf_envelopes.txt") }

// spec: ARB-09, BS-28
func TestScriptFairShareByMemory(t *testing.T) { runScript(t, "arb_09_drf_memory.txt") }

// spec: ARB-09, ARB-10, BS-22, BS-25
func TestScriptFairDrain(t *testing.T) { runScript(t, "arb_09_fair_drain.txt") }

// spec: BS-22, BS-23, BS-25
func TestScriptBackfill(t *testing.T) { runScript(t, "bs_22_backfill.txt") }

// spec: ARB-11, ARB-13
func TestScriptCaps(t *testing.T) { runScript(t, "arb_11_caps.txt") }

// spec: ARB-12, ARB-20, ARB-21
func TestScriptHeartbeatBackoff(t *testing.T) { runScript(t, "arb_12_heartbeat.txt") }

// spec: ARB-18, ARB-19, ARB-21
func TestScriptProbes(t *testing.T) { runScript(t, "arb_18_probes.txt") }

// spec: ARB-14, ARB-15, ARB-16, ARB-17
func TestScriptHeadroom(t *testing.T) { runScript(t, "arb_14_headroom.txt") }

// spec: ARB-22, ARB-23, ARB-24
func TestScriptOffers(t *testing.T) { runScript(t, "arb_23_offers.txt") }

// spec: ARB-03, ARB-27, ARB-28, API-22, API-23, API-24, API-29
func TestScriptLeases(t *testing.T) { runScript(t, "arb_27_leases.txt") }

// spec: ARB-33, ARB-34, API-26, API-27, API-28
func TestScriptOutcomes(t *testing.T) { runScript(t, "arb_34_outcomes.txt") }

// spec: ARB-39, ARB-40
func TestScriptReconcile(t *testing.T) { runScript(t, "arb_39_reconcile.txt") }

// spec: ARB-37, ARB-38, FAIL-10, FAIL-14
func TestScriptDeadline(t *testing.T) { runScript(t, "arb_37_deadline.txt") }

// spec: PLACE-04, PLACE-05, PLACE-07, PLACE-08, PLACE-09, PLACE-13, API-13
func TestScriptNodeCap(t *testing.T) { runScript(t, "place_04_node_cap.txt") }

// spec: PLACE-11, PLACE-12
func TestScriptPlacementOrder(t *testing.T) { runScript(t, "place_11_order.txt") }

// spec: FAIL-11, FAIL-14, FAIL-15, FAIL-16, FAIL-17, NSESS-24
func TestScriptReplace(t *testing.T) { runScript(t, "fail_14_replace.txt") }

// spec: FAIL-19, ARB-04, NSESS-24
func TestScriptRestart(t *testing.T) { runScript(t, "fail_19_restart.txt") }

// spec: PLACE-19, PLACE-20, PLACE-21, PLACE-22, PLACE-24, PLACE-25
func TestScriptPlacementRules(t *testing.T) { runScript(t, "place_19_rules.txt") }

// spec: ARB-41, ARB-42
func TestScriptUnlisted(t *testing.T) { runScript(t, "arb_41_unlisted.txt") }

// spec: PLACE-14, PLACE-15, PLACE-16, PLACE-17, PLACE-18
func TestScriptImageAffinity(t *testing.T) { runScript(t, "place_14_affinity.txt") }

// spec: BS-22, BS-23
func TestScriptDrainReservation(t *testing.T) { runScript(t, "later_drain.txt") }

// spec: BS-20, BS-22, BS-25
func TestScriptWideJobs(t *testing.T) { runScript(t, "bs_20_wide_jobs.txt") }

// spec: BS-21
func TestScriptPack(t *testing.T) { runScript(t, "bs_21_pack.txt") }

// spec: BS-22, BS-23, BS-24, BS-25
func TestScriptAutoDrain(t *testing.T) { runScript(t, "bs_22_drain.txt") }

// spec: BS-23, BS-24
func TestScriptDrainPriors(t *testing.T) { runScript(t, "bs_23_priors.txt") }

// spec: ARB-32, API-29
func TestScriptClaimRenewals(t *testing.T) { runScript(t, "arb_32_renewal.txt") }

// spec: API-17
func TestScriptImmediateGrant(t *testing.T) { runScript(t, "api_17_immediate.txt") }

// spec: BS-05
func TestScriptSnapshotRanked(t *testing.T) { runScript(t, "bs_05_snapshot.txt") }

// spec: API-34, ARB-35, OPS-02
func TestScriptSubmissionRefusedCancelCeilingZero(t *testing.T) {
	runScript(t, "api_34_refused.txt")
}

// spec: BS-20, BS-21, BS-22, BS-25
func TestScriptWideDemand(t *testing.T) { runScript(t, "bs_22_wide_demand.txt") }
