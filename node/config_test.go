package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vk-ci/vk/hubclient"
	"github.com/vk-ci/vk/internal/conffile"
	"github.com/vk-ci/vk/internal/deptest"
	"github.com/vk-ci/vk/proto/client"
)

func TestDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	if c.Node.ImageCacheIdleSecs != 1800 || c.Executor.Backend != BackendProcess || !c.Executor.Cgroups ||
		c.Output.SpoolLimit != 64*client.MiB || c.Node.Runner != RunnerUnset {
		t.Errorf("defaults = %+v", c)
	}
}

// configCase is one node.toml for LoadConfig and what it must give.
type configCase struct {
	name    string
	file    string
	wantErr string // substring; "" = no error
	check   func(t *testing.T, c Config)
}

// runConfigCases loads each case's file and checks the outcome; an error
// must name the file.
func runConfigCases(t *testing.T, tests []configCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "node.toml")
			if err := os.WriteFile(p, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadConfig(p)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("LoadConfig = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("LoadConfig error = %v, want one naming %q", err, tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), p):
				t.Errorf("error %v does not name the file", err)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

// The [executor.microvm] keys: net_mode and net_modes, the service VMs'
// memory, vCPUs and wait, as loaded (the values refused, each with an
// error naming the key, are TestLoadConfigRefused's).
func TestLoadConfigMicroVM(t *testing.T) {
	runConfigCases(t, []configCase{
		{name: "microvm net_mode switch", file: "version = 1\n[executor.microvm]\nnet_mode = \"switch\"\n",
			check: func(t *testing.T, c Config) {
				if got := c.Executor.MicroVM.netMode(); got != NetModeSwitch {
					t.Errorf("net mode %q, want switch", got)
				}
			}},
		{name: "microvm net_mode defaults to none", file: "version = 1\n",
			check: func(t *testing.T, c Config) {
				if got := c.Executor.MicroVM.netMode(); got != NetModeNone {
					t.Errorf("net mode %q, want none", got)
				}
			}},
		{name: "microvm service keys", file: "version = 1\n[executor.microvm]\nservice_mem_mib = 512\nservice_cpus = 2\nwait_for_services_timeout = 120\n",
			check: func(t *testing.T, c Config) {
				m := c.Executor.MicroVM
				if m.ServiceMemMiB != 512 || m.ServiceCPUs != 2 || m.serviceWait() != 120*time.Second {
					t.Errorf("service keys %+v, wait %v", m, m.serviceWait())
				}
			}},
		{name: "microvm service wait -1 is no wait", file: "version = 1\n[executor.microvm]\nwait_for_services_timeout = -1\n",
			check: func(t *testing.T, c Config) {
				if w := c.Executor.MicroVM.serviceWait(); w >= 0 {
					t.Errorf("wait %v, want negative (no health check)", w)
				}
			}},
		{name: "microvm service wait defaults", file: "version = 1\n",
			check: func(t *testing.T, c Config) {
				if m := c.Executor.MicroVM; m.serviceWait() != 0 || m.ServiceMemMiB != 0 || m.ServiceCPUs != 0 {
					t.Errorf("defaults %+v: want zeros, the executor's defaults", m)
				}
			}},
		{name: "microvm net_modes", file: "version = 1\n[executor.microvm]\nnet_modes = [\"none\", \"switch\"]\n",
			check: func(t *testing.T, c Config) {
				if m := c.Executor.MicroVM.NetModes; len(m) != 2 || m[1] != NetModeSwitch {
					t.Errorf("net_modes %q", m)
				}
			}},
	})
}

// The files LoadConfig refuses, each with what its error must name (the
// key, and for [executor.microvm] the section and the value); the error
// names the file too (runConfigCases).
func TestLoadConfigRefused(t *testing.T) {
	runConfigCases(t, []configCase{
		{name: "bad microvm net_mode", file: "version = 1\n[executor.microvm]\nnet_mode = \"bridge\"\n", wantErr: "[executor.microvm] net_mode"},
		{name: "microvm service memory too small", file: "version = 1\n[executor.microvm]\nservice_mem_mib = 64\n", wantErr: "[executor.microvm] service_mem_mib 64"},
		{name: "microvm service cpus negative", file: "version = 1\n[executor.microvm]\nservice_cpus = -2\n", wantErr: "[executor.microvm] service_cpus -2"},
		{name: "microvm service cpus too many", file: "version = 1\n[executor.microvm]\nservice_cpus = 65\n", wantErr: "[executor.microvm] service_cpus 65"},
		{name: "microvm service wait below -1", file: "version = 1\n[executor.microvm]\nwait_for_services_timeout = -5\n", wantErr: "[executor.microvm] wait_for_services_timeout -5"},
		{name: "microvm net_modes unknown", file: "version = 1\n[executor.microvm]\nnet_modes = [\"none\", \"bridge\"]\n", wantErr: "[executor.microvm] net_modes: \"bridge\""},
		{name: "microvm net_modes lack net_mode", file: "version = 1\n[executor.microvm]\nnet_mode = \"switch\"\nnet_modes = [\"none\"]\n", wantErr: "[executor.microvm] net_modes [\"none\"] lacks net_mode \"switch\""},
		{name: "unknown oci runtime", file: "version = 1\n[executor.oci]\nruntime = \"kata\"\n", wantErr: "runtime"},
		{name: "platform without runsc", file: "version = 1\n[executor.oci]\nplatform = \"kvm\"\n", wantErr: "platform"},
		{name: "bad pull policy", file: "version = 1\n[executor.images]\npull_policy = \"sometimes\"\n", wantErr: "pull_policy"},
		{name: "image registry is a host", file: "version = 1\n[executor.images]\nregistry = \"https://r.example.com/x\"\n", wantErr: "executor.images"},
		{name: "unknown key names it", file: "version = 1\n[node]\nnmae = \"x\"\n", wantErr: "nmae"},
		{name: "missing version", file: "[node]\nname = \"x\"\n", wantErr: "version"},
		{name: "bad runner", file: "version = 1\n[node]\nrunner = \"maybe\"\n", wantErr: "runner"},
		{name: "bad image_fallback", file: "version = 1\n[executor]\nimage_fallback = \"vm\"\n", wantErr: "image_fallback"},
		{name: "metrics off loopback", file: "version = 1\n[node]\nmetrics_listen = \"0.0.0.0:9101\"\n", wantErr: "metrics_listen"},
		{name: "bad backend and user listed together", file: "version = 1\n[executor]\nbackend = \"vm\"\nuser = \"root\"\n", wantErr: "user"},
		{name: "spool limit under the window", file: "version = 1\n[output]\nspool_limit = \"1M\"\n", wantErr: "spool_limit"},
		{name: "hub not https", file: "version = 1\n[node]\nhub = \"http://hub\"\n", wantErr: "hub"},
	})
}

func TestLoadConfig(t *testing.T) {
	tests := []configCase{
		{name: "full", file: `version = 1
[node]
name = "n1"
hub = "https://hub.example.com:8443"
state_dir = "/tmp/x"
labels = ["linux", "big"]
runner = "none"
metrics_listen = "127.0.0.1:9101"
[resources]
mem = "16G"
disk = "100G"
cpus = 8
[executor]
backend = "process"
user = "1000:1000"
[executor.schedule]
max_concurrency = 4
[registry]
url = "https://registry.example.com"
username = "u"
password = "p"
repository_prefix = "ci"
guest_credential = "job"
[output]
spool_limit = "128M"
`, check: func(t *testing.T, c Config) {
			if c.Node.Name != "n1" || c.Resources.Mem != 16*client.GiB || c.Resources.CPUs != 8 ||
				c.Executor.Schedule.MaxConcurrency != 4 || c.Registry.GuestCredential != "job" ||
				c.Output.SpoolLimit != 128*client.MiB || c.Node.ImageCacheIdleSecs != 1800 || !c.Executor.Cgroups {
				t.Errorf("config = %+v", c)
			}
		}},
		{name: "executor images", file: `version = 1
[registry]
url = "http://127.0.0.1:5000"
[executor]
backend = "auto"
default_image = "alpine:3.20"
require_image = true
[executor.images]
registry = "registry.example.com"
prefix = "dockerhub-proxy"
mirrors = { "index.docker.io" = ["mirror.example.com:5000"] }
plain_http = ["mirror.example.com:5000"]
pull_policy = "if-not-present"
`, check: func(t *testing.T, c Config) {
			im := c.Executor.Images
			if c.Executor.Backend != BackendAuto || c.Executor.DefaultImage != "alpine:3.20" || !c.Executor.RequireImage ||
				im.Registry != "registry.example.com" || im.Prefix != "dockerhub-proxy" || im.PullPolicy != "if-not-present" ||
				len(im.Mirrors["index.docker.io"]) != 1 {
				t.Errorf("config = %+v", c.Executor)
			}
			r := c.imageRules()
			if strings.Join(r.PlainHTTP, ",") != "mirror.example.com:5000,127.0.0.1:5000" {
				t.Errorf("plain-HTTP hosts %v: want the mirror and the http [registry]", r.PlainHTTP)
			}
			if c.ociCgroupParent() != "vk-oci" || c.processCgroupParent() != "vk" {
				t.Errorf("cgroup parents %q %q", c.ociCgroupParent(), c.processCgroupParent())
			}
		}},
		{name: "gvisor runtime", file: "version = 1\n[executor]\nbackend = \"oci\"\n[executor.oci]\nruntime = \"runsc\"\nplatform = \"ptrace\"\n", check: func(t *testing.T, c Config) {
			if c.Executor.OCI.Runtime != "runsc" || c.Executor.OCI.Platform != "ptrace" || c.ociRuntimeBinary() != "runsc" {
				t.Errorf("[executor.oci] = %+v, binary %q", c.Executor.OCI, c.ociRuntimeBinary())
			}
		}},
		{name: "runc binary by default", file: "version = 1\n[executor]\nbackend = \"oci\"\n", check: func(t *testing.T, c Config) {
			if c.ociRuntimeBinary() != "runc" {
				t.Errorf("binary %q, want runc", c.ociRuntimeBinary())
			}
		}},
		{name: "isolation keys", file: "version = 1\n[executor]\nbackend = \"auto\"\nimage_fallback = \"host\"\nallow_root_jobs = true\n",
			check: func(t *testing.T, c Config) {
				if c.Executor.ImageFallback != ImageFallbackHost || !c.Executor.AllowRootJobs {
					t.Errorf("executor = %+v", c.Executor)
				}
			}},
	}
	runConfigCases(t, tests)
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "absent.toml")); !errors.Is(err, conffile.ErrNoConfig) {
		t.Errorf("absent file: %v, want ErrNoConfig", err)
	}
	err := Config{Version: 1, Node: NodeSection{Runner: "x"}, Executor: ExecutorConfig{Backend: "y"}}.Validate()
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "state_dir") || !strings.Contains(err.Error(), "backend") {
		t.Errorf("Validate lists every problem: %v", err)
	}
}

// spec: PLACE-10
func TestDetectLocalRunner(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	unit := filepath.Join(dir, "gitlab-runner.service")
	if DetectLocalRunner([]string{unit}) {
		t.Fatal("detected a runner on a clean host")
	}
	if err := os.WriteFile(unit, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !DetectLocalRunner([]string{unit}) {
		t.Error("unit present, not detected")
	}
	os.Remove(unit)
	if err := os.WriteFile(filepath.Join(dir, "gitlab-runner"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !DetectLocalRunner(nil) {
		t.Error("binary on PATH, not detected")
	}
	yes := func() bool { return true }
	for runner, want := range map[string]bool{RunnerUnset: true, RunnerNone: false, RunnerLocal: true} {
		c := DefaultConfig()
		c.Node.Runner = runner
		if got := c.localRunner(yes); got != want {
			t.Errorf("runner %q with one detected: local = %v, want %v", runner, got, want)
		}
	}
	c := DefaultConfig()
	if c.localRunner(func() bool { return false }) {
		t.Error("unset with nothing detected must be none")
	}
}

func TestCapacityDetectsAndReserves(t *testing.T) {
	c := DefaultConfig()
	c.Node.StateDir = t.TempDir()
	c.Resources.CPUs = 2
	env, err := c.capacity()
	if err != nil {
		t.Skipf("host detection unavailable: %v", err)
	}
	b, _ := os.ReadFile("/proc/meminfo")
	total, _ := parseMemTotal(b)
	if env.MemBytes != total-DefaultReserveMem.Bytes() || env.CPUs != 2 || env.DiskBytes <= 0 {
		t.Errorf("capacity = %+v (MemTotal %d)", env, total)
	}
	c.Resources = ResourcesConfig{Mem: client.GiB, Disk: client.GiB, CPUs: 1, ReserveMem: 100 * client.GiB}
	if env, err := c.capacity(); err != nil || env.MemBytes != client.GiB.Bytes() {
		t.Errorf("stated values are taken as they are: %+v, %v", env, err)
	}
}

func TestParseHostFiles(t *testing.T) {
	if v, err := ParseLoadavg([]byte("0.52 0.58 0.59 1/467 12345\n")); err != nil || v != 0.52 {
		t.Errorf("ParseLoadavg = %v, %v", v, err)
	}
	for _, bad := range []string{"", "x 1 2", "-1 0 0", "NaN 1 1"} {
		if _, err := ParseLoadavg([]byte(bad)); err == nil {
			t.Errorf("ParseLoadavg(%q) accepted", bad)
		}
	}
	if v, err := parseMemTotal([]byte("MemFree: 1 kB\nMemTotal:  2048 kB\n")); err != nil || v != 2048*1024 {
		t.Errorf("parseMemTotal = %v, %v", v, err)
	}
	if _, err := parseMemTotal([]byte("MemTotal: lots\n")); err == nil {
		t.Error("parseMemTotal accepted junk")
	}
}

func FuzzParseLoadavg(f *testing.F) {
	for _, s := range []string{"0.52 0.58 0.59 1/467 12345\n", "", "1e308", "-0", "NaN", "+Inf 1 1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseLoadavg(b)
		if err == nil && (v < 0 || v != v || v > 1e9) {
			t.Fatalf("ParseLoadavg(%q) = %v", b, v)
		}
	})
}

func FuzzParseMemTotal(f *testing.F) {
	for _, s := range []string{"MemTotal:       16314932 kB\n", "MemTotal: 1", "MemTotal:", "MemTotal: 99999999999999999999 kB"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseMemTotal(b)
		if err == nil && v < 0 {
			t.Fatalf("parseMemTotal(%q) = %d", b, v)
		}
	})
}

func FuzzConfigDecode(f *testing.F) {
	f.Add([]byte("version = 1\n[node]\nname = \"x\"\n"))
	f.Add([]byte("version = 1\n[resources]\nmem = \"16G\"\ncpus = 3\n"))
	f.Add([]byte("version = 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := DefaultConfig()
		if err := conffile.Decode("node.toml", b, &c, ConfigVersion); err == nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("Decode accepted a config Validate refuses: %v", err)
			}
		}
	})
}

func TestLoadIdentity(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadIdentity(dir); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("LoadIdentity of an empty dir = %v, want ErrNotJoined", err)
	}
	e := hubclient.Enrolment{HubURL: "https://hub:8443", ID: "node-abc", Kind: hubclient.KindNode, CAPEM: []byte("pem"), Key: testKey}
	if err := hubclient.SaveEnrolment(dir, e); err != nil {
		t.Fatal(err)
	}
	id, err := LoadIdentity(dir)
	if err != nil || id.NodeID != "node-abc" || id.HubURL != "https://hub:8443" || string(id.CAPEM) != "pem" || !id.Key.Equal(testKey) {
		t.Errorf("LoadIdentity = %+v, %v", id, err)
	}
	e.Kind = hubclient.KindGitLab
	if err := hubclient.SaveEnrolment(dir, e); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadIdentity(dir); !errors.Is(err, ErrConfig) {
		t.Errorf("a relay's enrolment loaded as a node's: %v", err)
	}
}

// The node never depends on the hub or the scheduler (STYLE, import DAG).
func TestDeps(t *testing.T) {
	deptest.Forbid(t, "github.com/vk-ci/vk/node", "github.com/vk-ci/vk/hub", "github.com/vk-ci/vk/hub/",
		"github.com/vk-ci/vk/sched", "github.com/vk-ci/vk/relay", "github.com/vk-ci/vk/relay/")
}
