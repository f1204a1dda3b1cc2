package client

import (
	"errors"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/conffile"
)

// runnerConfig has the shape of a relay runner entry (relay.RunnerConfig
// and relay.EnvelopeConfig) and of the node's capacity sizes; it is decoded
// by internal/conffile, go-toml/v2 in strict mode, exactly as
// relay.LoadConfig and node.LoadConfig decode theirs. (Test-only import:
// the package itself stays stdlib-only.)
type runnerConfig struct {
	Version int      `toml:"version"`
	Pool    string   `toml:"pool"`
	Labels  []string `toml:"labels"`
	// the relay's EnvelopeConfig: Size, int, Size
	Envelope struct {
		Mem  Size `toml:"mem"`
		CPUs int  `toml:"cpus"`
		Disk Size `toml:"disk"`
	} `toml:"envelope"`
	OutputLimit Size `toml:"output_limit"`
}

func decodeRunner(doc string) (runnerConfig, error) {
	var cfg runnerConfig
	err := conffile.Decode("vk-gitlab.toml", []byte("version = 1\n"+doc), &cfg, 1)
	return cfg, err
}

// TestEnvelopeFromTOML: the relay's runner config writes envelopes as
// `{ mem = "16G", cpus = 8, disk = "16G" }`. Through the config loader
// (go-toml/v2) a size is a string in Size's text form (UnmarshalText) or
// a TOML integer counting bytes (decoded straight into Size's int64, as
// JSON integers are by UnmarshalJSON); anything else is an error naming
// the file, line and key.
//
// spec: PROTO-08, RELAY-02
func TestEnvelopeFromTOML(t *testing.T) {
	ok := []struct {
		name, env string
		want      Envelope
	}{
		{"strings", `{ mem = "16G", cpus = 8, disk = "16Gi" }`, Envelope{Mem: 16 * GiB, CPUs: 8, Disk: 16 * GiB}},
		{"integer bytes", `{ mem = "16G", cpus = 8, disk = 17179869184 }`, Envelope{Mem: 16 * GiB, CPUs: 8, Disk: 16 * GiB}},
		{"integer with underscores", `{ mem = 1_073_741_824, cpus = 1, disk = "1T" }`, Envelope{Mem: GiB, CPUs: 1, Disk: TiB}},
		{"hex integer", `{ mem = 0x40000000, cpus = 1, disk = "512M" }`, Envelope{Mem: GiB, CPUs: 1, Disk: 512 * MiB}},
		{"plain-digit string", `{ mem = "1024", cpus = 1, disk = "1kb" }`, Envelope{Mem: KiB, CPUs: 1, Disk: KiB}},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := decodeRunner("pool = \"ci\"\nlabels = [\"large-memory\"]\nenvelope = " + c.env + "\noutput_limit = \"4M\"\n")
			if err != nil {
				t.Fatal(err)
			}
			got := Envelope{Mem: cfg.Envelope.Mem, CPUs: cfg.Envelope.CPUs, Disk: cfg.Envelope.Disk}
			if got != c.want || cfg.Pool != "ci" || cfg.OutputLimit != 4*MiB {
				t.Errorf("decoded %+v (pool %q, output_limit %s), want %+v", got, cfg.Pool, cfg.OutputLimit, c.want)
			}
		})
	}

	bad := []struct {
		name, env string
		want      []string // in the error message
		// the error wraps ErrSize: go-toml/v2 keeps the chain of an
		// UnmarshalText error for a non-string value, but flattens it to
		// text (with the position) for a string
		size bool
	}{
		{"unknown unit", `{ mem = "16Q", cpus = 1, disk = "1G" }`, []string{"vk-gitlab.toml:3:", `"envelope"`, "invalid size", "unknown unit"}, false},
		{"fraction", `{ mem = "1.5G", cpus = 1, disk = "1G" }`, []string{"vk-gitlab.toml:3:", `"envelope"`, "invalid size"}, false},
		{"overflow", `{ mem = "9E", cpus = 1, disk = "1G" }`, []string{"vk-gitlab.toml:3:", "overflows"}, false},
		{"float", `{ mem = 1.5, cpus = 1, disk = "1G" }`, []string{"vk-gitlab.toml", "1.5"}, true},
		{"boolean", `{ mem = true, cpus = 1, disk = "1G" }`, []string{"vk-gitlab.toml", "true"}, true},
		{"unknown key", `{ mem = "1G", cpus = 1, disk = "1G", gpu = 1 }`, []string{"vk-gitlab.toml:3:", `unknown key "gpu"`}, false},
		{"integer overflow", `{ mem = 9223372036854775808, cpus = 1, disk = "1G" }`, []string{"vk-gitlab.toml:3:"}, false},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeRunner("pool = \"ci\"\nenvelope = " + c.env + "\n")
			if err == nil {
				t.Fatal("decoded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if c.size && !errors.Is(err, ErrSize) {
				t.Errorf("error %v does not wrap ErrSize", err)
			}
		})
	}
}

// A negative TOML integer reaches Size unchecked (go-toml/v2 sets the
// int64 directly; no hook sees it), so the config's own validation is what
// refuses it: Envelope.Validate, as relay.Config.Validate does for every
// runner's envelope.
//
// spec: PROTO-08
func TestNegativeIntegerSizeIsRefusedByValidation(t *testing.T) {
	cfg, err := decodeRunner("pool = \"ci\"\nenvelope = { mem = -1, cpus = 1, disk = \"1G\" }\n")
	if err != nil {
		t.Fatalf("decoder: %v (go-toml/v2 now checks the sign: update this test and Size's doc)", err)
	}
	env := Envelope{Mem: cfg.Envelope.Mem, CPUs: cfg.Envelope.CPUs, Disk: cfg.Envelope.Disk}
	if env.Mem != -1 {
		t.Fatalf("mem decoded as %d", env.Mem)
	}
	if err := env.Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("Validate(%+v) = %v, want ErrInvalid", env, err)
	}
}
