package memstore_test

import (
	"testing"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/hub/store/storetest"
)

// spec: API-42, API-43, API-41, AUTH-07
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: func(*testing.T) store.Store { return memstore.New() }})
}

func TestOpenPrefix(t *testing.T) {
	s, err := store.Open(t.Context(), "mem:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*memstore.Store); !ok {
		t.Fatalf(`store.Open("mem:") = %T, want *memstore.Store`, s)
	}
}

// principalsOnly is a store that has the principals role and nothing
// else, as a new backend might while it implements roles one at a time.
type principalsOnly struct {
	store.Principals
	close func() error
}

func (p principalsOnly) Close() error { return p.close() }

// A role's suite runs against a store of that role alone.
func TestRoleAlone(t *testing.T) {
	storetest.RunPrincipals(t, storetest.RoleHarness[storetest.PrincipalsStore]{New: func(*testing.T) storetest.PrincipalsStore {
		s := memstore.New()
		return principalsOnly{Principals: s, close: s.Close}
	}})
}
