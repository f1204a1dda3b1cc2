package need

import (
	"testing"
)

// recorder is a testing.TB that records how a test ended instead of ending.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skip(args ...any)                  { r.skipped = args[0].(string) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = format }

func TestMissingSkipsOffCIAndFailsUnderCI(t *testing.T) {
	for _, c := range []struct {
		name, ci, allow string
		wantFail        bool
	}{
		{"developer", "", "", false},
		{"ci", "true", "", true},
		{"ci allowing skips", "true", "1", false},
		{"ci not true", "false", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("CI", c.ci)
			t.Setenv("VK_ALLOW_SKIP", c.allow)
			r := &recorder{TB: t}
			Binary(r, "vk-no-such-package", "vk-no-such-binary-anywhere")
			if c.wantFail && (r.failed == "" || r.skipped != "") {
				t.Errorf("under CI: failed %q skipped %q, want a failure", r.failed, r.skipped)
			}
			if !c.wantFail && (r.skipped == "" || r.failed != "") {
				t.Errorf("off CI: failed %q skipped %q, want a skip", r.failed, r.skipped)
			}
		})
	}
}

func TestBinaryPresentDoesNothing(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	Binary(r, "coreutils", "true")
	if r.failed != "" || r.skipped != "" {
		t.Errorf("a present binary ended the test: failed %q skipped %q", r.failed, r.skipped)
	}
}
