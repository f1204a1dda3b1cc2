package testfleet

import (
	"context"
	"fmt"
)

// token mints a one-time enrolment token of kind (hubclient.KindNode or
// KindGitLab) the way an operator does: `vk-hub token create --kind
// <kind>` on the hub's admin socket. The principal then joins with it over
// TLS through its own link, pinning the CA the hub keeps in its state dir
// (`join --ca`).
func (h *Hub) token(ctx context.Context, kind string) (string, error) {
	tok, err := h.admin().CreateToken(ctx, kind, 0)
	if err != nil {
		return "", fmt.Errorf("testfleet: token create --kind %s: %w", kind, err)
	}
	return tok.Token, nil
}
