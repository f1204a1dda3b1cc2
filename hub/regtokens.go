package hub

import (
	"time"

	"github.com/vk-ci/vk/hub/regtoken"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/dispatch"
	"github.com/vk-ci/vk/sched"
)

// jobCache is the cache repository and registry token of j's start on
// node (XFER-13, XFER-17): minted now, when the node's reported
// [registry] url matches one of the hub's [[registries]], else nil (the
// node keeps caches with its own credential, XFER-15). The token lives in
// the start frame only: it is never stored, so a start sent again after a
// restart or a failover carries a token minted anew. A job whose GitLab
// URL names no repository gets none, with a warning in the hub's log.
func (d *Driver) jobCache(node sched.NodeID, j *jobRec) *dispatch.CacheRegistry {
	if d.tokens == nil || j.spec == nil || j.spec.GitLabCI == nil {
		return nil
	}
	n := d.nodes[d.ids.nodeName(node)]
	if n == nil || n.report == nil || !d.tokens.Minting(n.report.Registry) {
		return nil
	}
	ci := j.spec.GitLabCI
	tok, err := d.tokens.Mint(d.now(), n.report.Registry, regtoken.Job{
		ID: j.rec.ID, GitLabURL: ci.ServerURL, ProjectID: ci.Job.ProjectID,
		Protected: ci.Sources.Protected != nil && *ci.Sources.Protected,
		Timeout:   time.Duration(ci.TimeoutSecs) * time.Second,
	})
	if err != nil {
		d.log.Warn("no registry token for the job: it runs without a cache repository", logkey.JobID, j.rec.ID,
			logkey.NodeID, n.name, "registry", n.report.Registry, logkey.Err, err)
		return nil
	}
	d.log.Debug("registry token minted", logkey.JobID, j.rec.ID, logkey.NodeID, n.name, "token", tok)
	return &dispatch.CacheRegistry{Repository: tok.Repository, Token: tok.Bearer, ExpiresInSecs: int(tok.Lifetime / time.Second)}
}
