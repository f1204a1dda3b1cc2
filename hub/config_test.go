package hub

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/conffile"
	"github.com/vk-ci/vk/sched"
)

// docExample returns the TOML block after "<!-- example: name -->" in
// docs/hub.md, so the documented examples are the tested ones.
func docExample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/hub.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- example: " + regexp.QuoteMeta(name) + " -->\\s*```toml\\n(.*?)```")
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("docs/hub.md has no example %s", name)
	}
	return string(m[1])
}

func TestDefaultConfigValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:8443" || c.storeLocation() != "/var/lib/vk-hub/hub.db" || c.Limits.PerPrincipal != 256 || c.Limits.PerHub != 4096 || c.Auth.SkewSecs != 300 {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestLoadConfigExample(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "hub.toml")
	os.WriteFile(p, []byte(docExample(t, "hub.toml")), 0o600)
	c, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "10.0.0.5:8443" || c.UIURL != "https://hub.example.com" || c.CapacityPolicyFile != "/etc/vk/capacity.toml" || c.TickMillis != 250 {
		t.Fatalf("loaded %+v", c)
	}
}

func TestLoadConfigStrict(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body, want string
		is               error
	}{
		{"unknown key", "version = 1\n\n[limits]\nper_relay = 3\n", `:4:1: unknown key "limits.per_relay"`, nil},
		{"no version", "addr = \"127.0.0.1:1\"\n", "version", conffile.ErrVersion},
		{"wrong type", "version = 1\naddr = 5\n", "addr", nil},
		{"invalid values", "version = 1\n[limits]\nper_hub = -1\n[tls]\ncert = \"x\"\n", "per_hub", ErrConfig},
		{"both policies", "version = 1\ncapacity_policy_file = \"p\"\n[capacity_policy]\nprobe_limit = 1\n", "not both", ErrConfig},
		{"registry unknown key", "version = 1\n[[registries]]\nurl = \"https://r\"\nservic = \"s\"\n", `:4:1: unknown key "registries.servic"`, nil},
		{"registry bad url", "version = 1\n[[registries]]\nurl = \"r.example.com\"\nservice = \"s\"\nissuer = \"i\"\nkey_file = \"k\"\ncert_file = \"c\"\n", "registries[0].url", ErrConfig},
		{"registry missing key", "version = 1\n[[registries]]\nurl = \"https://r.example.com\"\nservice = \"s\"\nkey_file = \"k\"\ncert_file = \"c\"\n", "registries[0].issuer: is required", ErrConfig},
		{"bad inline policy", "version = 1\n[capacity_policy.tenants.x]\nrunners = [\"norunner\"]\n", "<relay>/<runner>", ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".toml")
			os.WriteFile(p, []byte(tc.body), 0o600)
			_, err := LoadConfig(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("LoadConfig = %v, want an error naming %s and %q", err, p, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v is not %v", err, tc.is)
			}
		})
	}
	if _, err := LoadConfig(filepath.Join(dir, "absent.toml")); !errors.Is(err, conffile.ErrNoConfig) {
		t.Fatalf("absent file: %v", err)
	}
}

// spec: ARB-09, ARB-11, ARB-14, ARB-21, ARB-41, PLACE-19
func TestPolicyExample(t *testing.T) {
	p := filepath.Join(t.TempDir(), "capacity.toml")
	os.WriteFile(p, []byte(docExample(t, "capacity.toml")), 0o600)
	pol, err := LoadPolicyFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		relay, runner, tenant string
		prod                  bool
	}{
		{"relay-eu", "deploy", "web", true},
		{"relay-eu", "build", "web", false},
		{"relay-us", "etl", "data", false},
		{"relay-us", "other", "default", false},
		{"relay-xy", "any", "default", false},
	} {
		tn, prod := policyTenantOf(&pol, tc.relay, tc.runner)
		if tn != tc.tenant || prod != tc.prod {
			t.Errorf("tenantOf(%s/%s) = %s %v, want %s %v", tc.relay, tc.runner, tn, prod, tc.tenant, tc.prod)
		}
	}
	ids := newIDTable()
	deploy, _ := ids.runner("relay-eu", "deploy")
	build, _ := ids.runner("relay-eu", "build")
	sp := policyToSched(&pol, ids)
	if err := sp.Validate(); err != nil {
		t.Fatal(err)
	}
	web, data := sp.Tenants[ids.tenant("web")], sp.Tenants[ids.tenant("data")]
	if web.Weight != 2 || web.Cap != 0 || web.Projects != nil {
		t.Errorf("web = %+v", web)
	}
	if data.Cap != 20 || len(data.Projects) != 1 || len(data.Projects["4711"].Rules) != 1 || data.Projects["4711"].Rules[0].Pools[0] != "secure" {
		t.Errorf("data = %+v", data)
	}
	if !sp.ProductionRunners[deploy] || sp.ProductionRunners[build] {
		t.Errorf("production runners = %v", sp.ProductionRunners)
	}
	if len(sp.Headroom) != 1 || sp.Headroom[0].Slots != 2 || sp.Headroom[0].Placement.Envelope != (sched.Resources{MemBytes: 8 << 30, DiskBytes: 40 << 30, CPUs: 4}) {
		t.Errorf("headroom = %+v", sp.Headroom)
	}
	if sp.ProbeLimit != 2 || sp.BusySecs != 60 {
		t.Errorf("numbers = %+v", sp)
	}
}
