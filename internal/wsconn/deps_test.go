package wsconn

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// The transport depends on the standard library, the WebSocket library,
// reqsign and the clock helper only.
func TestDeps(t *testing.T) {
	deptest.StdlibOnly(t, "github.com/vk-ci/vk/internal/wsconn",
		"github.com/coder/websocket", "github.com/vk-ci/vk/reqsign", "github.com/vk-ci/vk/internal/clock", "vendor/")
}
