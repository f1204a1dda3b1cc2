package loadgen

import (
	"context"
	"fmt"
	"sync"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/node/session"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/dispatch"
)

// Pool is the pool every lightweight node serves and every loop places
// its jobs in.
const Pool = "bench"

// nodeCPUs and nodeMem are what a lightweight node states; a job's
// envelope (jobEnvelope) is small enough that a node holds many.
const (
	nodeCPUs = 64
	nodeMem  = 256 << 30
	nodeDisk = 1 << 40
)

// lightNode is one node session without an executor. Its handler runs
// on the session client's goroutine and answers every frame at once;
// the only state it keeps is the pools the hub set (for its report).
type lightNode struct {
	id     string
	sess   *session.Client
	output []byte

	mu    sync.Mutex
	pools []string
	ready chan struct{} // closed at the first welcome
	once  sync.Once
}

// enrolNode joins one node with a fresh token and puts it in Pool. Its
// session client holds one session to t and one to each of others (the
// session URLs of further hub instances), sending every report to all,
// as a real node does (docs/ha.md).
func enrolNode(ctx context.Context, t *Target, name string, output []byte, others ...string) (*lightNode, error) {
	adm := t.Admin()
	tok, err := adm.CreateToken(ctx, hubclient.KindNode, 0)
	if err != nil {
		return nil, fmt.Errorf("loadgen: token create --kind node: %w", err)
	}
	res, key, err := hubclient.Join(ctx, t.URL, tok.Token, t.CAPEM, name, hubclient.KindNode)
	if err != nil {
		return nil, fmt.Errorf("loadgen: node %s join: %w", name, err)
	}
	if err := adm.SetPools(ctx, res.ID, []string{Pool}); err != nil {
		return nil, fmt.Errorf("loadgen: nodes pools %s: %w", res.ID, err)
	}
	u, tcfg, err := t.clientTLS()
	if err != nil {
		return nil, err
	}
	n := &lightNode{id: res.ID, output: output, pools: []string{Pool}, ready: make(chan struct{})}
	n.sess, err = session.New(session.Config{URL: "wss://" + u.Host + "/v1/node/session", URLs: others, NodeID: res.ID, Key: key,
		TLSConfig: tcfg, Release: "loadgen", QueueFrames: 1 << 16}, n)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// Connected sends the report and an empty held list on a new session.
func (n *lightNode) Connected(w dispatch.Welcome) {
	if !w.Resumed {
		n.mu.Lock()
		pools := append([]string(nil), n.pools...)
		n.mu.Unlock()
		n.sess.Send(&dispatch.Report{Release: "loadgen", Name: n.id, Pools: pools, Executor: "process",
			Resources: dispatch.Resources{CPUs: nodeCPUs, Mem: nodeMem, Disk: nodeDisk}})
		n.sess.Send(&dispatch.Held{})
	}
	n.once.Do(func() { close(n.ready) })
}

// Message answers the hub: offers accepted, starts run to completion at
// once, renewals and releases acknowledged.
func (n *lightNode) Message(m dispatch.Message) {
	switch m := m.(type) {
	case *dispatch.Offer:
		n.sess.Send(&dispatch.OfferReply{Reservation: m.Reservation, Reply: dispatch.ReplyAccepted, LeaseSecs: m.LeaseSecs})
	case *dispatch.Renew:
		n.sess.Send(&dispatch.Lease{Reservation: m.Reservation, State: dispatch.LeaseHeld, RemainingSecs: m.LeaseSecs})
	case *dispatch.Release:
		n.sess.Send(&dispatch.Lease{Reservation: m.Reservation, State: dispatch.LeaseGone, Why: dispatch.GoneReleased})
	case *dispatch.Start:
		exit := 0
		n.sess.Send(&dispatch.JobUpdate{Job: m.Job, State: dispatch.JobAccepted})
		n.sess.Send(&dispatch.Output{Job: m.Job, Offset: 0, Data: n.output})
		n.sess.Send(&dispatch.JobUpdate{Job: m.Job, State: dispatch.JobFinished})
		n.sess.Send(&dispatch.Result{Job: m.Job, Result: client.JobResult{ExitCode: &exit, OutputLen: int64(len(n.output))}})
	case *dispatch.Settings:
		n.mu.Lock()
		if m.PoolsSet || len(m.Pools) > 0 {
			n.pools = append([]string(nil), m.Pools...)
		}
		pools := append([]string(nil), n.pools...)
		n.mu.Unlock()
		n.sess.Send(&dispatch.Report{Release: "loadgen", Name: n.id, Pools: pools, Executor: "process",
			Resources: dispatch.Resources{CPUs: nodeCPUs, Mem: nodeMem, Disk: nodeDisk}})
	}
}

// Disconnected needs nothing: the session client redials.
func (n *lightNode) Disconnected(error) {}

// Heartbeat says the node is ready and free.
func (n *lightNode) Heartbeat() dispatch.Heartbeat {
	return dispatch.Heartbeat{State: dispatch.NodeReady,
		Free: &dispatch.Resources{CPUs: nodeCPUs, Mem: nodeMem, Disk: nodeDisk}}
}
