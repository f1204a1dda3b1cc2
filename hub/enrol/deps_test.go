package enrol

import (
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
)

// The enrolment endpoint speaks the wire types of proto/client; it does
// not import the client library that calls it.
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/hub/enrol", "github.com/vk-ci/vk/hubclient")
}
