package client

import (
	"testing"

	"github.com/vk-ci/vk/proto/internal/doccheck"
)

// TestDocumented: every exported identifier and field is documented
// (STYLE C5).
//
// spec: PROTO-01
func TestDocumented(t *testing.T) {
	doccheck.Check(t, ".")
}
