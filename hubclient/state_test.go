package hubclient

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vk-ci/vk/reqsign"
)

func testEnrolment(t *testing.T) Enrolment {
	t.Helper()
	key, err := reqsign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return Enrolment{HubURL: "https://hub.example:7443", ID: "relay-abc", Kind: KindGitLab,
		Joined: time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC), CAPEM: []byte("-----BEGIN CERTIFICATE-----\n"), Key: key}
}

// join stores key, hub URL, CA and ID under <state_dir>/hub/ with mode
// 0700 (files 0600); leave deletes them.
//
// spec: AUTH-09
func TestSaveLoadLeave(t *testing.T) {
	state := t.TempDir()
	e := testEnrolment(t)
	if err := SaveEnrolment(state, e); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(state, "hub")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v mode %v, want 0700", dir, err, fi.Mode().Perm())
	}
	for _, f := range []string{"key.pk8", "ca.pem", "enrolment.json"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", f, err)
		}
	}
	got, err := LoadEnrolment(state)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(e, got); d != "" {
		t.Errorf("LoadEnrolment (-saved +loaded):\n%s", d)
	}
	if cfg := got.Config(); cfg.Principal != e.ID || cfg.HubURL != e.HubURL {
		t.Errorf("Config() = %+v", cfg)
	}
	if err := Leave(state, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after leave, %s: %v, want gone", dir, err)
	}
	if _, err := LoadEnrolment(state); !errors.Is(err, ErrNotEnrolled) {
		t.Errorf("LoadEnrolment after leave = %v, want ErrNotEnrolled", err)
	}
	if err := Leave(state, nil); !errors.Is(err, ErrNotEnrolled) {
		t.Errorf("second Leave = %v, want ErrNotEnrolled", err)
	}
}

// A loosened directory is tightened on save and refused on load.
//
// spec: AUTH-09
func TestStateModes(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(state, "hub")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := SaveEnrolment(state, testEnrolment(t)); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("save left %s at %v", dir, fi.Mode().Perm())
	}
	os.Chmod(dir, 0o750)
	if _, err := LoadEnrolment(state); err == nil {
		t.Error("LoadEnrolment accepted a group-readable directory")
	}
}

// join (replace included) and leave are refused while a job is recorded,
// before the token is spent or a file touched.
//
// spec: AUTH-10
func TestBusyRefusal(t *testing.T) {
	state := t.TempDir()
	if err := SaveEnrolment(state, testEnrolment(t)); err != nil {
		t.Fatal(err)
	}
	busy := func() error { return errors.New("runner main: job 42 recorded in /var/lib/vk-gitlab/main.state") }
	if err := Leave(state, busy); !errors.Is(err, ErrBusy) {
		t.Errorf("Leave while busy = %v, want ErrBusy", err)
	}
	// The URL is unreachable on purpose: a refusal must come before any
	// network use.
	_, _, err := JoinAndSave(t.Context(), state, JoinOptions{HubURL: "https://127.0.0.1:1", Token: "vkj_gitlab_x",
		Name: "h", Kind: KindGitLab, Replace: true, Busy: busy})
	if !errors.Is(err, ErrBusy) {
		t.Errorf("join --replace while busy = %v, want ErrBusy", err)
	}
	_, _, err = JoinAndSave(t.Context(), state, JoinOptions{HubURL: "https://127.0.0.1:1", Token: "vkj_gitlab_x",
		Name: "h", Kind: KindGitLab})
	if !errors.Is(err, ErrAlreadyEnrolled) {
		t.Errorf("join without --replace = %v, want ErrAlreadyEnrolled", err)
	}
	if _, err := LoadEnrolment(state); err != nil {
		t.Errorf("refusals changed the enrolment: %v", err)
	}
	if err := Leave(state, func() error { return nil }); err != nil {
		t.Errorf("Leave once idle = %v", err)
	}
}
