package output

import (
	"testing"
	"testing/synctest"
)

// RunConformance runs this package's implementation-independent tests
// against stores made by newStore, for a backend outside the package
// (hub/store/pgstore's Output, from pg_test.go).
func RunConformance(t *testing.T, newStore func(t testing.TB) Store) {
	im := impl{name: "external", new: func(t testing.TB, _ string) Store { return newStore(t) }}
	t.Run("AppendTable", func(t *testing.T) { testAppendTable(t, im) })
	t.Run("ReadAt", func(t *testing.T) { testReadAt(t, im) })
	t.Run("CompleteRefusesNewBytes", func(t *testing.T) { testCompleteRefusesNewBytes(t, im) })
	t.Run("BadJobID", func(t *testing.T) { testBadJobID(t, im) })
	t.Run("Wait", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { testWait(t, im) }) })
	t.Run("AppendProperty", func(t *testing.T) {
		// One store for all runs (each uses its own job): a new one per
		// run can cost far more than the run.
		shared := keepOpen{newStore(t)}
		testAppendProperty(t, impl{name: "external", new: func(testing.TB, string) Store { return shared }})
	})
}

// keepOpen is a Store whose Close does nothing (the test's cleanup closes
// the store it wraps).
type keepOpen struct{ Store }

func (keepOpen) Close() error { return nil }
