package hub

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
)

// unreadablePrincipals fails principal lookups while down is set, as a
// database restarting does.
type unreadablePrincipals struct {
	store.Store
	down atomic.Bool
}

func (s *unreadablePrincipals) GetPrincipal(ctx context.Context, id string) (store.Principal, error) {
	if s.down.Load() {
		return store.Principal{}, errors.New("pgstore: the database system is shutting down")
	}
	return s.Store.GetPrincipal(ctx, id)
}

// A request whose principal cannot be read from the store (its database
// restarting) is answered 503 unavailable with a Retry-After, which a
// client retries, not 401 unauthorized, which a relay takes as a refusal
// and fails the job for (a relay unknown or removed stays 401: the
// security tests).
//
// spec: API-47, API-54
func TestPrincipalUnreadableIsUnavailable(t *testing.T) {
	h := newHarness(t)
	st := &unreadablePrincipals{}
	h.wrapStore = func(s store.Store) store.Store { st.Store = s; return st }
	h.restart()
	st.down.Store(true)
	e := h.wantErr(http.StatusServiceUnavailable, client.CodeUnavailable, "GET", "/v1/jobs/0123456789abcdef", nil)
	if e.RetryAfterSecs <= 0 {
		t.Errorf("503 without a retry delay: %+v", e)
	}
	st.down.Store(false)
	h.wantErr(http.StatusNotFound, client.CodeNotFound, "GET", "/v1/jobs/0123456789abcdef", nil)
}
