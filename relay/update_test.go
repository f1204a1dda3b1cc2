package relay

import (
	"bytes"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/relsign"
	"github.com/vk-ci/vk/proto/client"
)

// updateEnv is a hub stand-in serving one release over TLS and an
// updater whose "executable" is a file in a temporary directory.
type updateEnv struct {
	u       *updater
	exe     string
	release []byte
	served  atomic.Int32
	priv    ed25519.PrivateKey
}

func newUpdateEnv(t *testing.T) *updateEnv {
	t.Helper()
	e := &updateEnv{release: []byte("#!/bin/sh\necho 'vk-gitlab 0.5.0 (commit test)'\n")}
	pubPEM, privPEM, err := relsign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if e.priv, err = relsign.ParsePrivateKey(privPEM); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/releases/0.5.0/vk-gitlab" || r.Header.Get(client.HeaderRelay) != "relay-1" {
			http.NotFound(w, r)
			return
		}
		e.served.Add(1)
		w.Write(e.release)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	e.exe = filepath.Join(dir, "vk-gitlab")
	if err := os.WriteFile(e.exe, []byte("old binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "release.pub")
	os.WriteFile(keyFile, pubPEM, 0o644)
	_, relayKey, _ := ed25519.GenerateKey(nil)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cfg := Config{Hub: HubConfig{Allow: []string{"update"}, ReleaseKeyFile: keyFile}}
	u, err := newUpdater(cfg, hubclient.Enrolment{HubURL: srv.URL, ID: "relay-1", CAPEM: ca, Key: relayKey}, time.Now, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	u.exe = e.exe
	e.u = u
	return e
}

// offer is the update frame for the served bytes, signed with the
// release key.
func (e *updateEnv) offer() client.Update {
	sum, n, _ := relsign.Digest(bytes.NewReader(e.release))
	return client.Update{Release: "0.5.0", URL: "/v1/releases/0.5.0/vk-gitlab", SHA256: sum, Size: n, Signature: relsign.Sign(e.priv, "0.5.0", sum)}
}

// An offered release is installed only when it verifies: a flipped byte,
// another key, a missing signature, a wrong size or a binary that names
// another release are each refused, the running executable untouched
// and no .new left behind; a good one is swapped in with the old kept
// as .old.
//
// spec: OPS-04
func TestInstallVerifies(t *testing.T) {
	_, otherPriv, _ := ed25519.GenerateKey(nil)
	for _, tc := range []struct {
		name      string
		change    func(e *updateEnv, u *client.Update)
		wantErr   error
		wantFetch bool
	}{
		{"good", nil, nil, true},
		{"flipped byte", func(e *updateEnv, u *client.Update) { e.release[12] ^= 1 }, relsign.ErrDigest, true},
		{"wrong key", func(e *updateEnv, u *client.Update) { u.Signature = relsign.Sign(otherPriv, u.Release, u.SHA256) }, relsign.ErrSignature, false},
		{"missing signature", func(e *updateEnv, u *client.Update) { u.Signature = "" }, relsign.ErrNoSignature, false},
		{"wrong size", func(e *updateEnv, u *client.Update) { u.Size-- }, relsign.ErrSize, true},
		{"binary of another release", func(e *updateEnv, u *client.Update) {
			e.release = []byte("#!/bin/sh\necho 'vk-gitlab 0.4.9'\n")
			*u = e.offer()
		}, nil, true},
		{"path off the release route", func(e *updateEnv, u *client.Update) { u.URL = "/v1/jobs/x" }, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newUpdateEnv(t)
			up := e.offer()
			if tc.change != nil {
				tc.change(e, &up)
			}
			r, err := e.u.install(t.Context(), up)
			if got := e.served.Load() > 0; got != tc.wantFetch {
				t.Errorf("downloaded = %v, want %v", got, tc.wantFetch)
			}
			if _, serr := os.Stat(e.exe + ".new"); !os.IsNotExist(serr) {
				t.Errorf(".new left behind: %v", serr)
			}
			if tc.name == "good" {
				if err != nil {
					t.Fatal(err)
				}
				got, _ := os.ReadFile(e.exe)
				old, _ := os.ReadFile(e.exe + ".old")
				if !bytes.Equal(got, e.release) || string(old) != "old binary" || r.Exe != e.exe || r.Old != e.exe+".old" {
					t.Fatalf("after install: exe %q, old %q, restart %+v", got, old, r)
				}
				return
			}
			if err == nil {
				t.Fatal("refused nothing")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("install = %v, want %v", err, tc.wantErr)
			}
			if got, _ := os.ReadFile(e.exe); string(got) != "old binary" {
				t.Fatalf("running executable changed to %q", got)
			}
		})
	}
}

// A new binary that cannot be executed puts the old one back.
func TestExecFailureRestoresOld(t *testing.T) {
	dir := t.TempDir()
	exe, old := filepath.Join(dir, "vk-gitlab"), filepath.Join(dir, "vk-gitlab.old")
	os.WriteFile(exe, []byte("not executable"), 0o644)
	os.WriteFile(old, []byte("old binary"), 0o755)
	err := (&Restart{Release: "0.5.0", Exe: exe, Old: old}).Exec()
	if err == nil {
		t.Fatal("exec of a non-executable file succeeded")
	}
	got, _ := os.ReadFile(exe)
	if string(got) != "old binary" {
		t.Fatalf("after a failed exec the executable is %q", got)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf(".old still there: %v", err)
	}
}

// allow = ["update"] needs release_key_file.
func TestAllowUpdateNeedsKey(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GitLab.URL = "https://gitlab.example.com"
	cfg.Hub.Allow = []string{"update"}
	err := cfg.Validate()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("release_key_file")) {
		t.Fatalf("Validate = %v, want release_key_file named", err)
	}
}
