package testfleet

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/gitlabfake"
)

// WaitGitLab waits until ok holds for job id's snapshot in the tenant's
// GitLab, waking on every change the fake reports (no polling).
func (t *Tenant) WaitGitLab(ctx context.Context, id int64, ok func(gitlabfake.JobInfo) bool) (gitlabfake.JobInfo, error) {
	for {
		ch := t.GitLab.Changed()
		ji, err := t.GitLab.Job(id)
		if err != nil {
			return ji, err
		}
		if ok(ji) {
			return ji, nil
		}
		select {
		case <-ctx.Done():
			return ji, fmt.Errorf("testfleet: %s job %d (state %s, %d trace bytes): %w", t.Spec.Name, id, ji.State, len(ji.Trace), ctx.Err())
		case <-ch:
		}
	}
}

// WaitTrace waits until job id's GitLab trace contains s.
func (t *Tenant) WaitTrace(ctx context.Context, id int64, s string) error {
	_, err := t.WaitGitLab(ctx, id, func(ji gitlabfake.JobInfo) bool { return bytes.Contains(ji.Trace, []byte(s)) })
	return err
}

// WaitState waits until job id is in one of states.
func (t *Tenant) WaitState(ctx context.Context, id int64, states ...gitlabfake.JobState) (gitlabfake.JobInfo, error) {
	return t.WaitGitLab(ctx, id, func(ji gitlabfake.JobInfo) bool {
		for _, s := range states {
			if ji.State == s {
				return true
			}
		}
		return false
	})
}

// WaitHubJob waits until the hub's record of GitLab job id satisfies ok.
// The hub's store offers no watch, so this re-reads it every 20 ms.
func (t *Tenant) WaitHubJob(ctx context.Context, id int64, ok func(store.Job) bool) (store.Job, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var last store.Job
	var lastErr error
	for {
		j, err := t.HubJob(ctx, id)
		if err == nil {
			last = j
			if ok(j) {
				return j, nil
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("testfleet: hub job for %s GitLab job %d (last %+v, %v): %w", t.Spec.Name, id, summary(last), lastErr, ctx.Err())
		case <-tick.C:
		}
	}
}

// Started reports whether a hub job has begun running on its node (the
// node reported a stage).
func Started(j store.Job) bool { return j.State == "running" && j.Stage != "" }

func summary(j store.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "id=%s state=%s node=%s stage=%s settled=%v", j.ID, j.State, j.Node, j.Stage, j.Settled)
	return b.String()
}
