package relay

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/conffile"
	"github.com/vk-ci/vk/internal/testlog"
	"github.com/vk-ci/vk/relay/state"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("glrt-abcdefghijklmnop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "vk-gitlab.toml")
	body = strings.ReplaceAll(body, "TOKEN", tok)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const runnerTOML = `
[[runners]]
token_file = "TOKEN"
pool = "linux"
envelope = { mem = "16G", cpus = 4, disk = "20G" }
`

// Defaults are filled and the runner's name is its token's short form.
//
// spec: RELAY-02, RELAY-04
func TestLoadConfigDefaults(t *testing.T) {
	p := writeConfig(t, "version = 1\n[gitlab]\nurl = \"https://gitlab.example.com\"\n"+runnerTOML)
	cfg, toks, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Runners[0]
	if r.Name != "abcdefghi" || r.RequestConcurrency != 6 || r.OutputLimit != 4<<20 || r.Limit != 0 {
		t.Errorf("runner = %+v, want name abcdefghi, request_concurrency 6, output_limit 4M", r)
	}
	if r.Envelope.Mem != 16<<30 || r.Envelope.CPUs != 4 || r.Envelope.Disk != 20<<30 {
		t.Errorf("envelope = %+v", r.Envelope)
	}
	if cfg.Concurrent != 10 || cfg.StateDir != "/var/lib/vk-gitlab" || cfg.ShutdownTimeout != 3600 {
		t.Errorf("cfg = %+v, want concurrent 10, /var/lib/vk-gitlab, 3600", cfg)
	}
	if len(toks) != 1 || toks[0] != "glrt-abcdefghijklmnop" {
		t.Errorf("tokens = %q", toks)
	}
}

// Validation refuses concurrent or request_concurrency above 128 and more
// than 64 runners, naming the key.
//
// spec: RELAY-03, RELAY-02
func TestValidate(t *testing.T) {
	many := strings.Repeat(runnerTOML, 65)
	for _, tc := range []struct {
		name, body string
		want       []string // substrings; nil means valid
		is         error
	}{
		{"ok", runnerTOML, nil, nil},
		{"concurrent 128", "concurrent = 128\n" + runnerTOML, nil, nil},
		{"concurrent 129", "concurrent = 129\n" + runnerTOML, []string{"concurrent = 129", "1..128"}, ErrConfig},
		{"request_concurrency 129", runnerTOML + "request_concurrency = 129\n", []string{"runners[0].request_concurrency = 129"}, ErrConfig},
		{"65 runners", many, []string{"65 [[runners]]", "at most 64"}, ErrConfig},
		{"no pool", "[[runners]]\ntoken_file = \"TOKEN\"\nenvelope = { mem = \"1G\", cpus = 1, disk = \"1G\" }\n", []string{"runners[0].pool is required"}, ErrConfig},
		{"no envelope", "[[runners]]\ntoken_file = \"TOKEN\"\npool = \"p\"\n", []string{"runners[0].envelope"}, ErrConfig},
		{"bad size", "[[runners]]\ntoken_file = \"TOKEN\"\npool = \"p\"\nenvelope = { mem = \"16Q\", cpus = 1, disk = \"1G\" }\n", []string{"runners.envelope", "16Q"}, nil},
		{"unknown key", runnerTOML + "tags = [\"x\"]\n", []string{`"runners.tags"`}, nil},
		{"duplicate name", "[[runners]]\nname = \"a\"\ntoken_file = \"TOKEN\"\npool = \"p\"\nenvelope = { mem = \"1G\", cpus = 1, disk = \"1G\" }\n" +
			"[[runners]]\nname = \"a\"\ntoken_file = \"TOKEN\"\npool = \"p\"\nenvelope = { mem = \"1G\", cpus = 1, disk = \"1G\" }\n", []string{"runners[1] (a).name"}, ErrConfig},
		{"bad allow", "[hub]\nallow = [\"reboot\"]\n" + runnerTOML, []string{"hub.allow", "reboot"}, ErrConfig},
		{"hub urls", "[hub]\nurls = [\"https://hub-a:8443\", \"https://hub-b:8443/\"]\n" + runnerTOML, nil, nil},
		{"hub urls not https", "[hub]\nurls = [\"http://hub-a:8443\"]\n" + runnerTOML, []string{"hub.urls", "http://hub-a:8443", "https://host"}, ErrConfig},
		{"hub urls twice", "[hub]\nurls = [\"https://hub-a\", \"https://hub-a/\"]\n" + runnerTOML, []string{"hub.urls", "listed twice"}, ErrConfig},
		{"hub url and urls", "[hub]\nurl = \"https://hub-a\"\nurls = [\"https://hub-a\"]\n" + runnerTOML, []string{"hub.url and hub.urls"}, ErrConfig},
		{"no runners", "", []string{"no [[runners]]"}, ErrConfig},
		{"negative limit", runnerTOML + "limit = -1\n", []string{"runners[0].limit = -1"}, ErrConfig},
		{"metrics_listen loopback", "metrics_listen = \"127.0.0.1:9102\"\n" + runnerTOML, nil, nil},
		{"metrics_listen public", "metrics_listen = \"0.0.0.0:9102\"\n" + runnerTOML, []string{"metrics_listen", "loopback"}, ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			// [gitlab] must come before the runners' tables.
			if strings.HasPrefix(body, "[hub]") || strings.HasPrefix(body, "concurrent") || strings.HasPrefix(body, "metrics_listen") {
				body = "version = 1\n" + body
				body = strings.Replace(body, "[[runners]]", "[gitlab]\nurl = \"https://gitlab.example.com\"\n[[runners]]", 1)
			} else {
				body = "version = 1\n[gitlab]\nurl = \"https://gitlab.example.com\"\n" + body
			}
			_, _, err := LoadConfig(writeConfig(t, body))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("LoadConfig = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadConfig = nil, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}
	if _, _, err := LoadConfig(filepath.Join(t.TempDir(), "none.toml")); !errors.Is(err, conffile.ErrNoConfig) {
		t.Errorf("missing file: %v, want ErrNoConfig", err)
	}
}

// The daemon refuses to start on a state directory group or others can
// access, and creates a missing one 0700.
//
// spec: RELAY-05
func TestRunRefusesOpenStateDir(t *testing.T) {
	p := writeConfig(t, "version = 1\n[gitlab]\nurl = \"https://gitlab.example.com\"\n"+runnerTOML)
	cfg, toks, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(cfg.StateDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := Run(context.Background(), cfg, toks, testlog.New(t), Options{}); !errors.Is(err, state.ErrDirMode) {
		t.Errorf("Run on a 0750 state dir = %v, want ErrDirMode", err)
	}
	cfg.StateDir = filepath.Join(t.TempDir(), "fresh")
	err = Run(context.Background(), cfg, toks, testlog.New(t), Options{})
	fi, serr := os.Stat(cfg.StateDir)
	if serr != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir not created 0700: %v %v", fi, serr)
	}
	if err == nil || !strings.Contains(err.Error(), "join") {
		t.Errorf("Run without an enrolment = %v, want a hint to join", err)
	}
}

// One vk-gitlab serves one GitLab: a runner cannot name a server of its own
// (the key is refused with its line), and a config without [gitlab] url is
// refused.
//
// spec: RELAY-01
func TestOneGitLabServer(t *testing.T) {
	p := writeConfig(t, "version = 1\n[gitlab]\nurl = \"https://gitlab.example.com\"\n"+runnerTOML+"url = \"https://other.example.com\"\n")
	_, _, err := LoadConfig(p)
	if err == nil || !strings.Contains(err.Error(), `unknown key "runners.url"`) {
		t.Fatalf("LoadConfig with a per-runner url = %v, want the key refused", err)
	}
	p = writeConfig(t, "version = 1\n"+runnerTOML)
	if _, _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), "gitlab") {
		t.Fatalf("LoadConfig without [gitlab] url = %v, want an error naming gitlab", err)
	}
}

// Placement is per runner (GitLab's job response carries no tags): each
// [[runners]] entry has its own pool, labels and envelope, and that is
// the placement the relay reports and reserves with.
//
// spec: PLACE-01
func TestPlacementPerRunner(t *testing.T) {
	body := "version = 1\n[gitlab]\nurl = \"https://gitlab.example.com\"\n" + runnerTOML + `
[[runners]]
token_file = "TOKEN2"
name = "gpu"
pool = "gpu"
labels = ["cuda12", "large-memory"]
envelope = { mem = "64G", cpus = 16, disk = "200G" }
`
	p := writeConfig(t, body) // "TOKEN2" becomes <dir>/token2
	if err := os.WriteFile(filepath.Join(filepath.Dir(p), "token2"), []byte("glrt-zyxwvutsrqponmlk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, toks, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Runners) != 2 || len(toks) != 2 {
		t.Fatalf("runners %d, tokens %d; want 2 each", len(cfg.Runners), len(toks))
	}
	linux, gpu := cfg.Runners[0].Placement(), cfg.Runners[1].Placement()
	if linux.Pool != "linux" || len(linux.Labels) != 0 || linux.Envelope.CPUs != 4 {
		t.Errorf("first runner's placement = %+v, want pool linux, no labels, 4 CPUs", linux)
	}
	if gpu.Pool != "gpu" || strings.Join(gpu.Labels, ",") != "cuda12,large-memory" || gpu.Envelope.CPUs != 16 || gpu.Envelope.Mem != 64<<30 {
		t.Errorf("second runner's placement = %+v, want pool gpu, labels cuda12 and large-memory, 16 CPUs, 64G", gpu)
	}
}

// A runner that sets no request_concurrency gets six request loops, no
// more than its limit or the relay's concurrent; a value written out is
// kept.
//
// spec: RELAY-02, ARB-02
func TestDefaultRequestConcurrencyCapped(t *testing.T) {
	for _, n := range []struct{ runners, want int }{{1, 6}, {42, 6}, {43, 5}, {64, 4}} {
		if got := DefaultLoops(0, 128, n.runners); got != n.want {
			t.Errorf("DefaultLoops for %d runners = %d, want %d (at most 256 tickets a relay)", n.runners, got, n.want)
		}
	}
	for _, tc := range []struct {
		name, extra, top string
		want             int
	}{
		{"default", "", "", 6},
		{"limit 2", "limit = 2\n", "", 2},
		{"concurrent 3", "", "concurrent = 3\n", 3},
		{"written out", "request_concurrency = 1\n", "", 1},
		{"above the default", "request_concurrency = 9\nlimit = 4\n", "", 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, "version = 1\n"+tc.top+"[gitlab]\nurl = \"https://gitlab.example.com\"\n"+runnerTOML+tc.extra)
			cfg, _, err := LoadConfig(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Runners[0].RequestConcurrency; got != tc.want {
				t.Errorf("request_concurrency = %d, want %d", got, tc.want)
			}
		})
	}
}
