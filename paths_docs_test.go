package vk

import (
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub"
	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/node"
	"github.com/vk-ci/vk/relay"
)

var (
	hubPortRE  = regexp.MustCompile(`\b[a-z0-9.-]*hub[a-z0-9.-]*:([0-9]+)\b`)
	varLibRE   = regexp.MustCompile("/var/lib/vk[^\\s`\"'),;]*")
	etcVKRE    = regexp.MustCompile(`/etc/vk[a-z-]*/`) // a config directory (not /etc/vk-demo-image, a file in an image)
	pkiFileRE  = regexp.MustCompile(`pki/([a-z.]+[a-z])`)
	unitLineRE = regexp.MustCompile(`(?m)^(StateDirectory|ReadWritePaths)=(\S+)`)
)

// The ports and paths README, docs/ and the deploy units state are the
// code's defaults: the hub's port, the three state directories, the
// files of the hub's PKI and one config directory, /etc/vk/.
func TestDocumentedPortsAndPaths(t *testing.T) {
	_, hubPort, err := net.SplitHostPort(hub.DefaultAddr)
	if err != nil {
		t.Fatal(err)
	}
	stateDirs := []string{hub.DefaultStateDir, relay.DefaultStateDir, node.DefaultStateDir}
	pkiFiles := []string{pki.CACertFile, pki.CAKeyFile, pki.ServerCertFile, pki.ServerKeyFile}
	for _, d := range load(t, "README.md", "docs/*.md", "deploy/*.service") {
		for i, line := range strings.Split(d.Text, "\n") {
			at := func(format string, args ...any) {
				t.Helper()
				t.Errorf("%s:%d: "+format, append([]any{d.Path, i + 1}, args...)...)
			}
			for _, m := range hubPortRE.FindAllStringSubmatch(line, -1) {
				if m[1] != hubPort {
					at("hub address %s: the hub's port is %s", m[0], hubPort)
				}
			}
			for _, p := range varLibRE.FindAllString(line, -1) {
				if !slices.ContainsFunc(stateDirs, func(s string) bool { return p == s || strings.HasPrefix(p, s+"/") }) {
					at("%s is under none of the default state directories %v", p, stateDirs)
				}
			}
			for _, p := range etcVKRE.FindAllString(line, -1) {
				if p != "/etc/vk/" {
					at("%s: config files live in /etc/vk/", p)
				}
			}
			for _, m := range pkiFileRE.FindAllStringSubmatch(line, -1) {
				if !slices.Contains(pkiFiles, m[1]) {
					at("pki/%s: the hub's PKI directory holds %v", m[1], pkiFiles)
				}
			}
		}
	}
	// Each unit's state directory is its program's default.
	for unit, want := range map[string]string{
		"deploy/vk-hub.service":    hub.DefaultStateDir,
		"deploy/vk-gitlab.service": relay.DefaultStateDir,
		"deploy/vk-node.service":   node.DefaultStateDir,
	} {
		d := load(t, unit)[0]
		ms := unitLineRE.FindAllStringSubmatch(d.Text, -1)
		if len(ms) == 0 {
			t.Errorf("%s: neither StateDirectory= nor ReadWritePaths=", unit)
		}
		for _, m := range ms {
			dir := m[2]
			if m[1] == "StateDirectory" {
				dir = "/var/lib/" + dir
			}
			if dir != want {
				t.Errorf("%s: %s=%s is not the default state directory %s", unit, m[1], m[2], want)
			}
		}
	}
}
