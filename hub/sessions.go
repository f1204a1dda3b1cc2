package hub

import (
	"context"
	"errors"
	"fmt"

	"github.com/vk-ci/vk/hub/session"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/internal/edkey"
	"github.com/vk-ci/vk/internal/logkey"
	"github.com/vk-ci/vk/proto/client"
)

// sessionHandler adapts the driver to hub/session's RelayHandler: relay
// session events map onto the driver's exported relay methods (which
// tests call directly to play a relay). Node sessions go through the
// node router (noderouter.go).
type sessionHandler struct {
	d   *Driver
	ctx context.Context // the hub's; ends at shutdown
}

var _ session.RelayHandler = sessionHandler{}

func (h sessionHandler) RelayUp(s *session.RelaySession, _ *client.RelayHello) {
	h.d.RelayConnected(h.ctx, s.Relay(), s)
}

func (h sessionHandler) RelayMessage(s *session.RelaySession, m client.RelayMessage) {
	if err := h.d.RelayFrame(h.ctx, s.Relay(), m); err != nil {
		h.d.log.Warn("relay frame not handled", logkey.RelayID, s.Relay(), logkey.Err, err)
	}
}

func (h sessionHandler) RelayDown(s *session.RelaySession, _ error) {
	h.d.RelayDisconnected(h.ctx, s.Relay())
}

// principalLookup implements session.PrincipalLookup over the store.
type principalLookup struct {
	st interface {
		GetPrincipal(ctx context.Context, id string) (store.Principal, error)
	}
}

func (l principalLookup) LookupPrincipal(ctx context.Context, kind session.Kind, id string) (session.Principal, error) {
	p, err := l.st.GetPrincipal(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return session.Principal{}, fmt.Errorf("%w: %s", session.ErrUnknownPrincipal, id)
	}
	if err != nil {
		return session.Principal{}, err
	}
	want := store.KindNode
	if kind == session.KindRelay {
		want = store.KindRelay
	}
	if p.Kind != want {
		return session.Principal{}, fmt.Errorf("%w: %s is a %s, not a %s", session.ErrUnknownPrincipal, id, p.Kind, kind)
	}
	if err := edkey.Check(p.PublicKey); err != nil {
		// A weak stored key (enrolled before keys were checked) would
		// let a constant signature pass: treat the principal as unknown.
		return session.Principal{}, fmt.Errorf("%w: %s: stored key refused: %v", session.ErrUnknownPrincipal, id, err)
	}
	return session.Principal{Key: p.PublicKey, Removed: p.Removed}, nil
}
