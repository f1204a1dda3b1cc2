package client

import (
	"errors"
	"fmt"
	"strings"
)

// Envelope is the room one job may use on a node (PROTO-08): set by the
// relay's runner config, offered to nodes by the hub, enforced by the node.
type Envelope struct {
	// Mem is the memory set aside. Required (> 0).
	Mem Size `json:"mem"`
	// CPUs is the number of vCPUs. Required (> 0).
	CPUs int `json:"cpus"`
	// Disk is the scratch disk set aside. Required (> 0).
	Disk Size `json:"disk"`
}

// ErrInvalid: a body fails validation (the hub answers 400 invalid).
var ErrInvalid = errors.New("client: invalid")

// Validate reports a non-positive field as an error wrapping ErrInvalid.
func (e Envelope) Validate() error {
	var errs []string
	if e.Mem <= 0 {
		errs = append(errs, "mem must be > 0")
	}
	if e.CPUs <= 0 {
		errs = append(errs, "cpus must be > 0")
	}
	if e.Disk <= 0 {
		errs = append(errs, "disk must be > 0")
	}
	if errs != nil {
		return fmt.Errorf("%w: envelope: %s", ErrInvalid, strings.Join(errs, ", "))
	}
	return nil
}

// Fits reports whether e fits within room in every dimension.
func (e Envelope) Fits(room Envelope) bool {
	return e.Mem <= room.Mem && e.CPUs <= room.CPUs && e.Disk <= room.Disk
}

// String formats e as "mem=16G cpus=8 disk=16G".
func (e Envelope) String() string {
	return fmt.Sprintf("mem=%s cpus=%d disk=%s", e.Mem, e.CPUs, e.Disk)
}

// Placement says where a runner's work may run (PROTO-08, PLACE-01..03): a
// node of Pool carrying every one of Labels, with room for Envelope. Set in
// the relay's runner config and reported to the hub.
type Placement struct {
	// Pool is the operator-named node pool. Required.
	Pool string `json:"pool"`
	// Labels a node must all carry; empty means any node of the pool.
	Labels []string `json:"labels,omitempty"`
	// Envelope is the room each job of the runner gets.
	Envelope Envelope `json:"envelope"`
}

// Validate checks the pool and envelope; errors wrap ErrInvalid.
func (p Placement) Validate() error {
	if p.Pool == "" {
		return fmt.Errorf("%w: placement: pool missing", ErrInvalid)
	}
	return p.Envelope.Validate()
}
