// Package testnode is what the in-process harnesses (internal/testfleet,
// internal/realhub) share about the real node agents they run: enrolment
// the way an operator does it, and the settings every harness node starts
// from. Each harness adds its own (labels, executor, registry) on top.
package testnode

import (
	"context"
	"fmt"

	"github.com/vk-ci/vk/hub/admin"
	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/node"
)

// Enrol enrols a node as an operator does: `vk-hub token create --kind
// node` on the hub's admin socket, `vk node join <hubURL> --token …
// --ca …` into dir (pinning caPEM), then `vk-hub nodes pools <id> <pools>`.
// It returns the node's principal ID.
func Enrol(ctx context.Context, adm *admin.Client, hubURL string, caPEM []byte, dir, name string, pools []string) (string, error) {
	tok, err := adm.CreateToken(ctx, hubclient.KindNode, 0)
	if err != nil {
		return "", fmt.Errorf("testnode: token create --kind node: %w", err)
	}
	res, err := node.Join(ctx, dir, node.JoinOptions{HubURL: hubURL, Token: tok.Token, CAPEM: caPEM, Name: name})
	if err != nil {
		return "", fmt.Errorf("testnode: node %s join: %w", name, err)
	}
	if err := adm.SetPools(ctx, res.ID, pools); err != nil {
		return "", fmt.Errorf("testnode: nodes pools %s: %w", res.ID, err)
	}
	return res.ID, nil
}

// Config is the configuration every harness node starts from: the node
// enrolled as id in dir, in pools, with the stated resources instead of
// the host's (so tests behave the same on any machine), no local
// gitlab-runner, a 5 s shutdown timeout, and a cgroup parent of its own,
// vk-<id>: an agent owns its parent and kills what it finds there at
// start, so nodes sharing a host must not share one.
func Config(dir, name, id string, pools []string, res node.ResourcesConfig) node.Config {
	cfg := node.DefaultConfig()
	cfg.Node.Name = name
	cfg.Node.StateDir = dir
	cfg.Node.Runner = node.RunnerNone
	cfg.Node.Pools = pools
	cfg.Node.ShutdownTimeoutSecs = 5
	cfg.Resources = res
	cfg.Executor.CgroupParent = "vk-" + id
	// Test fleets run as root (cgroups, runc) and the process backend runs
	// job scripts as the test's user: allowed explicitly.
	cfg.Executor.AllowRootJobs = true
	return cfg
}
