package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/store"
)

// fakeUpdates records the updates the Relays page sends.
type fakeUpdates struct {
	mu   sync.Mutex
	sent []string
	fail error
}

func (f *fakeUpdates) List(context.Context) ([]admin.Release, error) {
	return []admin.Release{{Version: "0.5.0", Size: 10, Published: t0.Add(-time.Hour)}, {Version: "0.4.9", Size: 9}}, nil
}

func (f *fakeUpdates) UpdateRelay(_ context.Context, relay, version string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.sent = append(f.sent, relay+" "+version)
	return nil
}

func updatesEnv(t *testing.T, fu *fakeUpdates) *env {
	e := newEnv(t, func(c *Config) { c.Updates = fu })
	e.be.relays = []RelayRow{
		{ID: "relay-a", Name: "ci-1", Connected: true, Release: "0.4.9", AllowsUpdate: true},
		{ID: "relay-b", Name: "ci-2", Connected: true, Release: "0.4.9"},
		{ID: "relay-c", Name: "ci-3", Release: "0.4.9", AllowsUpdate: true},
	}
	return e
}

// The Relays page offers the published releases to a connected relay
// that allows updates, and only to it; the button sends the update,
// writes the audit entry and comes back saying so. A refusal from the hub
// writes nothing.
//
// spec: OPS-04
func TestRelayUpdateButton(t *testing.T) {
	fu := &fakeUpdates{}
	e := updatesEnv(t, fu)
	body, _ := e.get("/relays", http.StatusOK)
	if n := strings.Count(body, `/update"`); n != 1 {
		t.Fatalf("%d update forms on the Relays page, want 1 (relay-a only)", n)
	}
	for _, want := range []string{`action="/relays/relay-a/update"`, `<option value="0.5.0">`, "not allowed by the relay", "the relay must be connected"} {
		if !strings.Contains(body, want) {
			t.Errorf("Relays page lacks %q", want)
		}
	}
	resp := e.submit("/relays", "/relays/relay-a/update", url.Values{"release": {"0.5.0"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/relays?done=update" {
		t.Fatalf("POST = %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if diff := cmp.Diff([]string{"relay-a 0.5.0"}, fu.sent); diff != "" {
		t.Errorf("updates sent (-want +got):\n%s", diff)
	}
	want := []store.AuditEntry{{Seq: 1, Time: t0, Actor: "alice", Action: "relay.update", Subject: "relay-a", Detail: "0.5.0"}}
	if diff := cmp.Diff(want, e.audit()); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
	if body, _ := e.get("/relays?done=update", http.StatusOK); !strings.Contains(body, flashes["update"]) {
		t.Error("the Relays page does not confirm the update")
	}

	fu.fail = fmt.Errorf("%w: relay relay-a does not allow updates", admin.ErrInvalid)
	if resp := e.submit("/relays", "/relays/relay-a/update", url.Values{"release": {"0.5.0"}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("refused update = %d, want 400", resp.StatusCode)
	}
	if n := len(e.audit()); n != 1 {
		t.Errorf("%d audit entries after a refused update, want 1", n)
	}
}

// Without its CSRF token the update is refused and nothing is sent.
func TestRelayUpdateNeedsCSRF(t *testing.T) {
	fu := &fakeUpdates{}
	e := updatesEnv(t, fu)
	_, resp := e.get("/relays", http.StatusOK)
	c := sessionOf(t, resp)
	if r := e.do("POST", "/relays/relay-a/update", url.Values{"release": {"0.5.0"}}, c); r.StatusCode != http.StatusForbidden {
		t.Errorf("POST without token = %d, want 403", r.StatusCode)
	}
	if len(fu.sent) != 0 {
		t.Errorf("sent %v without a CSRF token", fu.sent)
	}
}
