package session

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/internal/wsconn"
	"github.com/vk-ci/vk/proto/dispatch"
)

// countingHandler is a hub core that only counts node reports.
type countingHandler struct {
	up   sync.WaitGroup
	msgs atomic.Int64
}

func (h *countingHandler) NodeUp(*NodeSession, *dispatch.Hello, bool) { h.up.Done() }
func (h *countingHandler) NodeMessage(*NodeSession, dispatch.Message) { h.msgs.Add(1) }
func (h *countingHandler) NodeDown(*NodeSession, error)               {}

// BenchmarkHubIngest: the hub ingesting heartbeats and output frames
// from 200 and from 1,000 nodes over loopback TLS 1.3 WebSockets; every
// fourth frame is a 1 KiB output chunk, the rest heartbeats. Reports
// node reports/s.
func BenchmarkHubIngest(b *testing.B) {
	for _, nodes := range []int{200, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchIngest(b, nodes) })
	}
}

func benchIngest(b *testing.B, nodes int) {
	h := startHub(b, Config{Logger: testlog.Discard()})
	ch := &countingHandler{}
	h.nodes.h = ch
	conns := make([]*wsconn.Conn, nodes)
	ch.up.Add(nodes)
	for i := range nodes {
		id := fmt.Sprint("node-", i)
		key := testKey(byte(i % 256))
		h.look.add(KindNode, id, key)
		c, err := wsconn.Dial(context.Background(), h.nodeURL(), key, id, h.cliTLS, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.CloseNow()
		hello, _ := dispatch.Encode(dispatch.Frame{Msg: dispatch.Hello{Node: id, Versions: dispatch.NodeVersions}})
		if err := c.WriteFrame(context.Background(), hello); err != nil {
			b.Fatal(err)
		}
		if _, err := c.ReadFrame(context.Background()); err != nil {
			b.Fatal(err)
		}
		conns[i] = c
	}
	ch.up.Wait()
	load := 0.5
	data := make([]byte, 1024)
	per := b.N/nodes + 1
	total := int64(per * nodes)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(1); seq <= uint64(per); seq++ {
				var m dispatch.Message = dispatch.Heartbeat{State: dispatch.NodeReady, Load1: &load, Jobs: 2, Reservations: 1}
				if seq%4 == 0 {
					m = dispatch.Output{Job: "job-1", Offset: int64(seq) * 1024, Data: data}
				}
				fb, err := dispatch.Encode(dispatch.Frame{Seq: seq, Msg: m})
				if err != nil {
					b.Error(err)
					return
				}
				if err := c.WriteFrame(context.Background(), fb); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	for ch.msgs.Load() < total {
		time.Sleep(100 * time.Microsecond) // the hub drains what the sockets hold
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(total)/elapsed.Seconds(), "reports/s")
}
