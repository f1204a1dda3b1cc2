// Package version reports the build's version, commit and Go version, the
// same way for every vk binary (`--version`).
//
// Version and Commit are set at link time:
//
//	go build -ldflags "-X github.com/vk-ci/vk/internal/version.Version=1.2.3 \
//	  -X github.com/vk-ci/vk/internal/version.Commit=abcdef0" ./cmd/...
//
// Without them Version is "dev" and Commit is read from the module build
// info when the binary was built inside a git checkout with VCS stamping.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release version; "dev" for an unreleased build.
var Version = "dev"

// Commit is the source commit the binary was built from; empty when unknown.
var Commit = ""

// String returns "<program> <version> (commit <commit>, <go version>)", the
// line every vk binary prints for --version.
func String(program string) string {
	c := Commit
	if c == "" {
		c = vcsRevision()
	}
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("%s %s (commit %s, %s %s/%s)", program, Version, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			if len(s.Value) > 12 {
				return s.Value[:12]
			}
			return s.Value
		}
	}
	return ""
}
