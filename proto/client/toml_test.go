package client

import (
	"testing"

	"github.com/BurntSushi/toml"
)

// TestEnvelopeFromTOML: the relay's runner config writes envelopes as
// `{ mem = "16G", cpus = 8, disk = "16G" }`; sizes also accept integers.
// (Test-only import: the package itself stays stdlib-only.)
//
// spec: PROTO-08, RELAY-02
func TestEnvelopeFromTOML(t *testing.T) {
	var cfg struct {
		Pool     string   `toml:"pool"`
		Labels   []string `toml:"labels"`
		Envelope Envelope `toml:"envelope"`
	}
	const doc = `
pool = "ci"
labels = ["large-memory"]
envelope = { mem = "16G", cpus = 8, disk = 17179869184 }
`
	if _, err := toml.Decode(doc, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Envelope != (Envelope{Mem: 16 * GiB, CPUs: 8, Disk: 16 * GiB}) {
		t.Errorf("decoded %+v", cfg.Envelope)
	}
	var bad struct {
		Envelope Envelope `toml:"envelope"`
	}
	if _, err := toml.Decode(`envelope = { mem = "16Q", cpus = 1, disk = "1G" }`, &bad); err == nil {
		t.Error("a malformed size decoded")
	}
}
