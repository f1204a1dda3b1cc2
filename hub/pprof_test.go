package hub

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/pki"
)

// The runtime's profiles are served on the admin socket only: the hub's
// network listener answers 404 to them, signed or not, and never sends a
// profile.
func TestNoPprofOnNetwork(t *testing.T) {
	h := newHarness(t)
	tcfg, err := pki.ClientConfig(h.srv.CAPEM(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: tcfg}}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
		code, body, _ := h.call("GET", path, nil)
		if code != http.StatusNotFound || strings.Contains(string(body), "profile") {
			t.Errorf("signed GET %s = %d %.200q, want 404", path, code, body)
		}
		resp, err := plain.Get(h.srv.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(b), "profile") {
			t.Errorf("unsigned GET %s = %d %.200q, want 404", path, resp.StatusCode, b)
		}
	}
}
