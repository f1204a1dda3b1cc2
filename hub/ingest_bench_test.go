package hub

import (
	"fmt"
	"testing"

	"github.com/vk-ci/vk/proto/dispatch"
)

// BenchmarkDriverIngest measures what the hub's driver spends on node
// reports (BS-09) with 1,000 nodes connected: each op is one frame of the
// next node in turn through Driver.NodeFrame, as the session layer hands
// them over: three heartbeats (a new 1-minute load each) to one
// change-driven report (the node's labels change). The session layer's
// own cost per frame (TLS, WebSocket, decode) is BenchmarkHubIngest's, in
// hub/session. It reports reports/s.
func BenchmarkDriverIngest(b *testing.B) {
	const nodes = 1000
	h := newHarness(b)
	ctx := b.Context()
	d := h.srv.Driver()
	names := make([]string, nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("node-%04d", i)
		if err := d.NodeConnected(ctx, names[i], dropNode{}, false); err != nil {
			b.Fatal(err)
		}
		d.NodeFrame(ctx, names[i], &dispatch.Report{Resources: dispatch.Resources{CPUs: 8, Mem: 16 << 30, Disk: 100 << 30}, Pools: []string{"linux"}})
		d.NodeFrame(ctx, names[i], &dispatch.Held{})
		d.NodeFrame(ctx, names[i], &dispatch.Heartbeat{State: dispatch.NodeReady})
	}
	labels := [][]string{{"a"}, {"b"}}
	i := 0
	for b.Loop() {
		n := names[i%nodes]
		var m dispatch.Message
		if i%4 == 3 {
			m = &dispatch.Report{Resources: dispatch.Resources{CPUs: 8, Mem: 16 << 30, Disk: 100 << 30}, Pools: []string{"linux"}, Labels: labels[(i/4)%2]}
		} else {
			load := float64(i%400) / 100
			m = &dispatch.Heartbeat{State: dispatch.NodeReady, Load1: &load}
		}
		if err := d.NodeFrame(ctx, n, m); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reports/s")
}
