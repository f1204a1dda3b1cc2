package stage

import (
	"slices"
	"testing"

	"github.com/vk-ci/vk/proto/job"
)

// spec: XFER-24
// The tree pulled out of a guest is what the job's caches and artifacts
// can select, all of them together, or all of it when one can select
// anywhere.
func TestPullRoots(t *testing.T) {
	for _, tc := range []struct {
		name  string
		j     job.CiJob
		roots []string
		all   bool
	}{
		{"nothing kept", job.CiJob{}, nil, false},
		{"caches and artifacts together", job.CiJob{
			Caches:    []job.Cache{{Paths: []string{"vendor/bundle", ".npm/"}, Policy: "pull"}},
			Artifacts: []job.Artifact{{Paths: []string{"build/**/*.o", "vendor/bundle/x"}, Exclude: []string{"build/tmp"}}},
		}, []string{".npm", "build", "vendor/bundle"}, false},
		{"untracked cache", job.CiJob{
			Caches:    []job.Cache{{Untracked: true}},
			Artifacts: []job.Artifact{{Paths: []string{"out"}}},
		}, nil, true},
		{"artifact anywhere", job.CiJob{Artifacts: []job.Artifact{{Paths: []string{"out"}}, {Paths: []string{"**/junit.xml"}}}}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			roots, all := pullRoots(&tc.j)
			if !slices.Equal(roots, tc.roots) || all != tc.all {
				t.Errorf("pullRoots = %q, %v; want %q, %v", roots, all, tc.roots, tc.all)
			}
		})
	}
}
