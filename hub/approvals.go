package hub

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/vk-ci/vk/hub/api"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
)

// Approvals (API-49, API-56, RSESS-07, OPS-06). With approvals.required an
// operator approves each GitLab server and project before the hub takes
// its work; without, everything counts as approved. A server is named by
// its instance: the host (and port, if any) of its URL, e.g.
// "gitlab.example.com" — the <instance> of `vk-hub projects approve` and
// of approval URLs.

// approval returns the approval state of (instance, project), recording a
// first sighting as pending. project 0 is the server.
func (d *Driver) approval(instance string, project int64, path string) store.ApprovalState {
	if !d.cfg.Approvals.Required {
		return store.ApprovalApproved
	}
	// One step, not read-then-write: an operator's decision written by
	// the admin socket or the UI between the two would be overwritten.
	a := store.Approval{Instance: instance, Project: project, Path: path, State: store.ApprovalPending, Updated: d.now()}
	cur, created, err := d.st.CreateApproval(d.bg, a)
	if err != nil {
		d.log.Error("recording a pending approval failed", "instance", instance, "project", project, logkey.Err, err)
		return store.ApprovalPending
	}
	if created {
		d.log.Info("awaiting operator approval", "instance", instance, "project", project, "path", path)
	}
	return cur.State
}

// approvalURL returns the UI page of a project (or with project 0 the
// pending servers list), "" without a UI (API-56).
func (d *Driver) approvalURL(instance string, project int64) string {
	if d.cfg.UIURL == "" {
		return ""
	}
	base := strings.TrimSuffix(d.cfg.UIURL, "/") + "/gitlab"
	if project == 0 {
		return base
	}
	return base + "/" + url.PathEscape(instance) + "/projects/" + strconv.FormatInt(project, 10)
}

// serverStatus is the status of a relay's GitLab server (RSESS-07).
func (d *Driver) serverStatus(r *relayRec) client.ServerStatus {
	if r.report == nil {
		return client.ServerStatus{Status: client.ApprovalPending}
	}
	inst := store.InstanceKey(r.report.GitLabURL)
	if !d.cfg.Approvals.Required {
		return client.ServerStatus{Status: client.ApprovalApproved}
	}
	if inst == "" {
		return client.ServerStatus{Status: client.ApprovalRefused, Message: "the relay reported no usable GitLab URL"}
	}
	switch d.approval(inst, 0, r.report.GitLabURL) {
	case store.ApprovalApproved:
		return client.ServerStatus{Status: client.ApprovalApproved}
	case store.ApprovalRejected:
		return client.ServerStatus{Status: client.ApprovalRejected, ApprovalURL: d.approvalURL(inst, 0), Message: "an operator rejected this GitLab server"}
	}
	return client.ServerStatus{Status: client.ApprovalPending, ApprovalURL: d.approvalURL(inst, 0)}
}

// sendServerStatus tells a connected relay its server's status.
func (d *Driver) sendServerStatus(r *relayRec) {
	if r.send == nil {
		return
	}
	st := d.serverStatus(r)
	if err := r.send.Send(&st); err != nil {
		d.log.Warn("server status not sent", logkey.RelayID, r.name, logkey.Err, err)
	}
}

// checkJobApproval refuses a job of another GitLab server than its relay's
// (API-48) or of a server or project not approved (API-49, API-56).
func (d *Driver) checkJobApproval(r *relayRec, sub client.JobSubmission) error {
	ci := sub.Spec.GitLabCI
	inst := store.InstanceKey(ci.ServerURL)
	if r.report != nil && r.report.GitLabURL != "" && store.InstanceKey(r.report.GitLabURL) != inst {
		return api.Errorf(client.CodeForbidden, "job of GitLab server %s, not the relay's %s", inst, store.InstanceKey(r.report.GitLabURL))
	}
	if !d.cfg.Approvals.Required {
		return nil
	}
	for _, q := range []struct {
		project int64
		path    string
		what    string
	}{{0, ci.ServerURL, "GitLab server " + inst}, {ci.Job.ProjectID, ci.Job.ProjectPath, "project " + ci.Job.ProjectPath + " (ID " + strconv.FormatInt(ci.Job.ProjectID, 10) + ")"}} {
		switch d.approval(inst, q.project, q.path) {
		case store.ApprovalApproved:
			continue
		case store.ApprovalRejected:
			return &api.Error{Code: client.CodeProjectRejected, Msg: q.what + " was rejected by an operator of the fleet hub", ApprovalURL: d.approvalURL(inst, q.project)}
		default:
			return &api.Error{Code: client.CodeApprovalPending, Msg: q.what + " is waiting for approval on the fleet hub", ApprovalURL: d.approvalURL(inst, q.project)}
		}
	}
	return nil
}
