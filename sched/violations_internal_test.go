package sched

import (
	"strconv"
	"testing"
)

// A Core that keeps breaking a rule keeps the first violations and counts
// the rest, so a long-running hub's Core does not grow without bound.
func TestViolationsBounded(t *testing.T) {
	c := New(Policy{}, 1)
	for i := range maxViolations + 36 {
		c.violate("v" + strconv.Itoa(i))
	}
	if len(c.violations) != maxViolations {
		t.Fatalf("kept %d violations, want %d", len(c.violations), maxViolations)
	}
	errs := c.CheckInvariants()
	if len(errs) != maxViolations+1 || errs[0] != "v0" || errs[maxViolations] != "36 more violations not kept" {
		t.Fatalf("CheckInvariants = %d errors, first %q, last %q", len(errs), errs[0], errs[len(errs)-1])
	}
}
