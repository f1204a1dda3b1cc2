package node

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/node/journal"
)

// ErrNotJoined wraps hubclient.ErrNotEnrolled when the state dir has no
// enrolment: run `vk node join` first.
var ErrNotJoined = errors.New("node: not joined to a hub (run `vk node join`)")

// Identity is what a node needs to dial its hub: the enrolment `vk node
// join` stored under <state_dir>/hub/ (hubclient.SaveEnrolment).
type Identity struct {
	// NodeID is the enrolled ID.
	NodeID string
	// Key is the node key (AUTH-06).
	Key ed25519.PrivateKey
	// HubURL is the hub's base URL, https://host:port.
	HubURL string
	// CAPEM is the hub's CA certificate (PEM); nil means the system roots.
	CAPEM []byte
}

// LoadIdentity reads the enrolment from the state dir.
func LoadIdentity(stateDir string) (Identity, error) {
	e, err := hubclient.LoadEnrolment(stateDir)
	if errors.Is(err, hubclient.ErrNotEnrolled) {
		return Identity{}, fmt.Errorf("%w: %w", ErrNotJoined, err)
	}
	if err != nil {
		return Identity{}, err
	}
	if e.Kind != "" && e.Kind != hubclient.KindNode {
		return Identity{}, fmt.Errorf("%w: %s is enrolled as a %s, not a node", ErrConfig, stateDir, e.Kind)
	}
	return Identity{NodeID: e.ID, Key: e.Key, HubURL: e.HubURL, CAPEM: e.CAPEM}, nil
}

// JoinOptions are `vk node join`'s inputs.
type JoinOptions struct {
	// HubURL and Token (one-time, AUTH-08) are required.
	HubURL, Token string
	// CAPEM pins the hub's CA; nil trusts it on first use (the caller
	// prints the fingerprint).
	CAPEM []byte
	// Name is the node's display name.
	Name string
	// Replace re-enrols a node already enrolled (a new principal).
	Replace bool
}

// Join enrols the node with a hub and stores the enrolment in the state
// dir (AUTH-08, AUTH-09). It refuses while the journal still holds jobs
// whose results the hub has not recorded (AUTH-10): they belong to the
// old enrolment.
func Join(ctx context.Context, stateDir string, o JoinOptions) (hubclient.JoinResult, error) {
	busy := func() error {
		j, err := journal.Open(filepath.Join(stateDir, "journal"), nil)
		if err != nil {
			return err
		}
		defer j.Close()
		if n := len(j.Unfinished()) + len(j.Unrecorded()); n > 0 {
			return fmt.Errorf("%w: %d jobs in %s await their result's recording", hubclient.ErrBusy, n, filepath.Join(stateDir, "journal"))
		}
		return nil
	}
	_, res, err := hubclient.JoinAndSave(ctx, stateDir, hubclient.JoinOptions{
		HubURL: o.HubURL, Token: o.Token, CAPEM: o.CAPEM, Name: o.Name, Kind: hubclient.KindNode,
		Replace: o.Replace, Busy: busy,
	})
	return res, err
}
