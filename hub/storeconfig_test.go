package hub

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/conffile"
)

// The [store] table (and the older one-line `store = "…"`) decodes,
// validates and names the location the hub opens.
func TestStoreConfig(t *testing.T) {
	tests := []struct {
		name, toml string
		wantLoc    string // "" when invalid
		wantErr    string
	}{
		{"default", ``, "/var/lib/vk-hub/hub.db", ""},
		{"one-line mem", `store = "mem:"`, "mem:", ""},
		{"one-line path", `store = "/srv/hub.db"`, "/srv/hub.db", ""},
		{"bolt path", "[store]\nkind = \"bolt\"\npath = \"/srv/hub.db\"", "/srv/hub.db", ""},
		{"bolt default path", "[store]\nkind = \"bolt\"", "/var/lib/vk-hub/hub.db", ""},
		{"mem", "[store]\nkind = \"mem\"", "mem:", ""},
		{"postgres dsn", "[store]\nkind = \"postgres\"\ndsn = \"host=db user=vk\"", "postgres:host=db user=vk", ""},
		{"postgres without dsn", "[store]\nkind = \"postgres\"", "", "exactly one of store.dsn and store.dsn_file"},
		{"postgres both", "[store]\nkind = \"postgres\"\ndsn = \"x\"\ndsn_file = \"/f\"", "", "exactly one of"},
		{"postgres with path", "[store]\nkind = \"postgres\"\ndsn = \"x\"\npath = \"/p\"", "", "store.path is for kind"},
		{"dsn without kind", "[store]\ndsn = \"x\"", "", "need store.kind"},
		{"unknown kind", "[store]\nkind = \"etcd\"", "", `store.kind "etcd"`},
		{"postgres with lease", "[store]\nkind = \"postgres\"\ndsn = \"x\"\nlease = true\nlease_ttl_ms = 3000\ninstance = \"hub-a\"", "postgres:x", ""},
		{"lease on bolt", "[store]\nlease = true", "", "need store.kind"},
		{"lease ttl too short", "[store]\nkind = \"postgres\"\ndsn = \"x\"\nlease = true\nlease_ttl_ms = 100", "", "at least 300"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Version = 0
			err := conffile.Decode("hub.toml", []byte("version = 1\n"+tt.toml+"\n"), &c, ConfigVersion)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := c.storeLocation(); got != tt.wantLoc {
					t.Fatalf("location %q, want %q", got, tt.wantLoc)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
			}
		})
	}
	c := DefaultConfig()
	c.Store = StoreConfig{Kind: "etcd"}
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate: %v, want ErrConfig", err)
	}
}

// store.dsn_file is read at start, trimmed, and refused when group or
// others may read it (it holds the database password).
func TestStoreDSNFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "dsn")
	if err := os.WriteFile(p, []byte("host=db user=vk password=s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	c.Store = StoreConfig{Kind: StorePostgres, DSNFile: p}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	loc, err := c.openLocation()
	if err != nil || loc != "postgres:host=db user=vk password=s3cret" {
		t.Fatalf("openLocation = %q, %v", loc, err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		_, err := c.openLocation()
		if err == nil || !strings.Contains(err.Error(), "0600") || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("mode %04o: %v, want a refusal asking for 0600 that does not show the file", mode, err)
		}
	}
	os.Chmod(p, 0o400)
	if _, err := c.openLocation(); err != nil {
		t.Fatalf("mode 0400: %v", err)
	}
	c.Store.DSNFile = filepath.Join(dir, "missing")
	if _, err := c.openLocation(); err == nil {
		t.Fatal("missing dsn_file accepted")
	}
}
