package schedtest

import (
	"strings"
	"testing"

	"github.com/vk-ci/vk/sched"
)

// An argument that does not parse fails the script line with an error
// naming it, instead of reading as 0.
func TestScriptArgumentsMustParse(t *testing.T) {
	for _, c := range []struct{ line, bad string }{
		{"node add n1 cpu=8x mem=16G", `"8x"`},
		{"node add nx cpu=8 mem=16G", `"nx"`},
		{"policy probe_limit=two", `"two"`},
		{"policy lease=9a", `"9a"`},
	} {
		s := &Script{H: New(sched.Policy{}, 1)}
		out, err := s.Run(c.line)
		if err == nil {
			t.Errorf("%q: ran (%v), want a parse error", c.line, out)
			continue
		}
		if !strings.Contains(err.Error(), c.bad) {
			t.Errorf("%q: error %q does not name %s", c.line, err, c.bad)
		}
	}
	s := &Script{H: New(sched.Policy{}, 1)}
	if _, err := s.Run("node add n1 cpu=8 mem=16G"); err != nil {
		t.Errorf("a well-formed line failed: %v", err)
	}
}
