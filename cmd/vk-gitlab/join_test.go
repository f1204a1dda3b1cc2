package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hub/enrol"
	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/hub/store/memstore"
	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/relay/state"
)

// join against the hub's real enrolment endpoint keeps key, hub URL, CA and
// relay ID under <state_dir>/hub/ (0700, files 0600); leave deletes them.
//
// spec: AUTH-08, AUTH-09
func TestJoinAndLeave(t *testing.T) {
	b, err := pki.Ensure(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	en, err := enrol.New(enrol.Config{Store: memstore.New(), CAPEM: b.CACertPEM})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	en.Register(mux)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = pki.ServerConfig(b.Server)
	srv.StartTLS()
	defer srv.Close()
	tok, err := en.NewToken(t.Context(), store.KindRelay, time.Hour, "test")
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, b.CACertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "state")
	out, err := execute(t, joinCmd(), tok.Text+"\n", srv.URL, "--token", "-", "--ca", ca, "--state-dir", dir)
	if err != nil {
		t.Fatalf("join: %v\n%s", err, out)
	}
	e, err := hubclient.LoadEnrolment(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.ID, "relay-") || e.HubURL != srv.URL || !strings.Contains(out, e.ID) {
		t.Errorf("enrolment %+v, output %q", e, out)
	}
	fi, err := os.Stat(hubclient.Dir(dir))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("hub dir: %v %v, want 0700", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(hubclient.Dir(dir), hubclient.KeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v, want 0600", fi, err)
	}
	// The state directory the daemon then uses passes its own check.
	if err := state.CheckDir(dir); err != nil {
		t.Error(err)
	}
	if _, err := execute(t, leaveCmd(), "", "--state-dir", dir); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if _, err := os.Stat(hubclient.Dir(dir)); !os.IsNotExist(err) {
		t.Errorf("hub dir after leave: %v", err)
	}
}
