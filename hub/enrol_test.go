package hub

import (
	"net/http"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

// TestEnrolThroughHub mints a token on the admin socket, joins with it on
// the client listener and signs a client API request with the pinned key:
// the wiring of hub/admin and hub/enrol into hub.Start.
//
// spec: AUTH-08, AUTH-13
func TestEnrolThroughHub(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	tok, err := admin.Dial(admin.SocketPath(h.dir)).CreateToken(ctx, "gitlab", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if tok.CAFingerprint != pki.Fingerprint(caDER(h.srv.CAPEM())) {
		t.Fatalf("token fingerprint %q, want the hub CA's", tok.CAFingerprint)
	}
	res, key, err := hubclient.Join(ctx, h.srv.URL(), tok.Token, h.srv.CAPEM(), "relay-host", "gitlab")
	if err != nil {
		t.Fatal(err)
	}
	tcfg, _ := pki.ClientConfig(res.CAPEM, "127.0.0.1")
	joined := *h
	joined.hc = &http.Client{Transport: &reqsign.Transport{Key: key, Principal: res.ID, TLSConfig: tcfg, Now: h.clk.Now}}
	// Authenticated: an unknown ticket is 410, not 401.
	joined.wantErr(http.StatusGone, client.CodeReservationGone, "GET", "/v1/reservations/tickets/t"+h.srv.drv.epoch+"-1", nil)
	// The token is one-time.
	if _, _, err := hubclient.Join(ctx, h.srv.URL(), tok.Token, h.srv.CAPEM(), "again", "gitlab"); err == nil {
		t.Fatal("a used token enrolled again")
	}
}
