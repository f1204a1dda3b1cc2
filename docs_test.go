package vk

import (
	"os"
	"strings"
	"testing"
)

// The operator documentation must keep telling what the spec says it tells.
// Each case names the file and phrases that carry the instruction; removing
// or rewording the instruction away fails the test.
func TestOperatorDocs(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		wants []string
	}{
		// spec: OPS-05
		{"upgrade the hub first", "docs/protocol.md", []string{"hub before its relays"}},
		// spec: OPS-07
		{"pre-create the relay state dir", "docs/enrolment.md", []string{"install -d -m 0700 -o <user> -g <group> /var/lib/vk-gitlab"}},
		// spec: OPS-08
		{"explicit runner names", "docs/enrolment.md", []string{"explicit name", "never resumed"}},
		// spec: OPS-09
		{"re-enrol after SIGTERM", "docs/enrolment.md", []string{"Re-enrol only after stopping the daemon with SIGTERM", "shutdown_timeout", "GitLab's timeout"}},
		// spec: OPS-10
		{"own runner for restricted projects", "docs/capacity-policy.md", []string{"placement-restricted project a runner of its own"}},
		// spec: OPS-11
		{"gitlab-runner's MIT notice", "NOTICE", []string{"GitLab Runner", "The MIT License (MIT)", "Copyright (c) 2015-2019 GitLab Inc."}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			text := strings.Join(strings.Fields(string(b)), " ")
			for _, w := range tc.wants {
				if !strings.Contains(text, w) {
					t.Errorf("%s no longer says %q", tc.file, w)
				}
			}
		})
	}
}
