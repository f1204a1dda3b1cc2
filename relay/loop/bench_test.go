package loop

import (
	"testing"

	"github.com/vk-ci/vk/internal/gitlabfake"
	"github.com/vk-ci/vk/proto/client"
)

// BenchmarkTraceRelay measures a finished job's output relayed from the hub
// into GitLab's trace (1 MiB patches, checksum, final update, settle), over
// real loopback sockets: bytes/s is the relay's end-to-end trace throughput.
func BenchmarkTraceRelay(b *testing.B) {
	e := newEnv(b, envOptions{})
	m := e.manager(0, 10)
	e.gate.Set(true)
	stop := e.run(m)
	defer stop(false)
	out := output(3, 8<<20)
	b.SetBytes(int64(len(out)))
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		glID := e.pipeline()
		var id string
		e.hub.WaitFor(b, "the job", func() bool {
			for k, j := range e.hub.Jobs {
				if j.View.State != client.JobFinished {
					id = k
					return true
				}
			}
			return false
		})
		e.waitGitLab(glID, "commit", committed)
		b.StartTimer()
		e.hub.AppendOutput(id, out)
		e.hub.Finish(id, client.JobResult{})
		e.waitGitLab(glID, "success", func(ji gitlabfake.JobInfo) bool { return ji.State == gitlabfake.StateSuccess })
	}
}
