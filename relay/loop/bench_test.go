package loop

import (
	"testing"

	"github.com/vk-ci/vk/internal/gitlabfake"
)

// BenchmarkTraceRelay measures whole jobs through the real hub and a real
// node, each printing 3 MiB (with the node's timestamps) that the relay
// patches into GitLab's trace (1 MiB patches, checksum, final update,
// settle), over real loopback sockets. bytes/s is the end-to-end trace
// throughput of a job, the node's run and git fetch included.
func BenchmarkTraceRelay(b *testing.B) {
	e := newEnv(b, envOptions{})
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	defer stop(false)
	var n int64
	for b.Loop() {
		glID := e.pipeline([]string{"seq 1 85000"})
		ji := e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
		n = int64(len(ji.Trace))
	}
	b.SetBytes(n)
}
