package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/relay/state"
)

func execute(t *testing.T, c *cobra.Command, stdin string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	c.SetArgs(args)
	c.SetIn(strings.NewReader(stdin))
	c.SetOut(&out)
	c.SetErr(&out)
	err := c.Execute()
	return out.String(), err
}

// join and leave are refused while a state file records a job, before the
// token is spent.
//
// spec: AUTH-10
func TestJoinLeaveRefusedWhileBusy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := state.CheckDir(dir); err != nil {
		t.Fatal(err)
	}
	s, err := state.Open(dir, "r1", "relay-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(state.Job{GitLabID: 9, Token: "t", SubmitRequestID: "x", Phase: state.PhaseCommitted}); err != nil {
		t.Fatal(err)
	}
	// The hub URL is unreachable: a refusal must come before any request.
	_, err = execute(t, joinCmd(), "vkj_token\n", "https://127.0.0.1:1", "--token", "-", "--state-dir", dir)
	if !errors.Is(err, hubclient.ErrBusy) || !strings.Contains(err.Error(), "r1.json") {
		t.Errorf("join while busy = %v, want ErrBusy naming r1.json", err)
	}
	_, err = execute(t, leaveCmd(), "", "--state-dir", dir)
	if !errors.Is(err, hubclient.ErrBusy) {
		t.Errorf("leave while busy = %v, want ErrBusy", err)
	}
	if err := s.Delete(9); err != nil {
		t.Fatal(err)
	}
	_, err = execute(t, leaveCmd(), "", "--state-dir", dir)
	if !errors.Is(err, hubclient.ErrNotEnrolled) {
		t.Errorf("leave when idle and not enrolled = %v, want ErrNotEnrolled", err)
	}
}

func TestReadToken(t *testing.T) {
	for _, tc := range []struct {
		arg, stdin, want string
		ok               bool
	}{
		{"-", "vkj_abc\n", "vkj_abc", true},
		{"-", "  vkj_abc  ", "vkj_abc", true},
		{"-", "\n", "", false},
		{"", "", "", false},
		{"vkj_x", "", "vkj_x", true},
	} {
		got, err := readToken(tc.arg, strings.NewReader(tc.stdin))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("readToken(%q, %q) = %q, %v; want %q ok=%v", tc.arg, tc.stdin, got, err, tc.want, tc.ok)
		}
	}
}
