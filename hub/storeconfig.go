package hub

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Store kinds of [StoreConfig.Kind].
const (
	StoreBolt     = "bolt"
	StorePostgres = "postgres"
	StoreMem      = "mem"
)

// StoreConfig is hub.toml's [store] table: where the hub's records live.
// The older one-line form `store = "<location>"` ("mem:" or a bbolt file
// path) still reads, as Path.
type StoreConfig struct {
	// Kind is "bolt" (the default: one bbolt file), "postgres" (a
	// PostgreSQL database, for a hub whose state must outlive its
	// machine: docs/ha.md) or "mem" (nothing survives a restart; tests).
	Kind string `toml:"kind"`
	// Path is the bbolt file (kind bolt); empty means <state_dir>/hub.db.
	// Also any store location ("mem:", "bolt:<file>") for the one-line form.
	Path string `toml:"path"`
	// DSN is the PostgreSQL connection string (kind postgres), a libpq
	// key=value string or a postgres:// URL.
	DSN string `toml:"dsn"`
	// DSNFile is a file holding the DSN instead (kind postgres), so the
	// password stays out of hub.toml; it must not be readable by group or
	// others (mode 0600 or stricter).
	DSNFile string `toml:"dsn_file"`
	// Lease (kind postgres) makes the hub contend for the leader lease and
	// fence every write with the lease's epoch. Until it holds the lease
	// it is a hot standby (docs/ha.md): it serves node sessions and
	// builds the fleet picture from their reports, but sends no command
	// and answers the client API 503 unavailable naming the leader. A
	// hub that loses the lease stops. Default off.
	Lease bool `toml:"lease"`
	// LeaseTTLMillis is the lease's lifetime on the database's clock,
	// renewed every third of it. Default 5000.
	LeaseTTLMillis int `toml:"lease_ttl_ms"`
	// Instance names this hub in the lease row; empty means the host name.
	Instance string `toml:"instance"`
	// AdvertiseURL (with lease) is this instance's client API URL as
	// relays must reach it, https://host:port: while it leads, standbys
	// name it in their 503 answers. Empty means https://<addr>.
	AdvertiseURL string `toml:"advertise_url"`
}

// UnmarshalText reads the one-line form `store = "<location>"`.
func (s *StoreConfig) UnmarshalText(b []byte) error {
	*s = StoreConfig{Path: string(b)}
	return nil
}

// validate lists the [store] table's problems; bad is Validate's.
func (s *StoreConfig) validate(bad func(string, ...any)) {
	if (s.Lease || s.LeaseTTLMillis != 0 || s.Instance != "" || s.AdvertiseURL != "") && s.Kind != StorePostgres {
		bad("store.lease, lease_ttl_ms, instance and advertise_url need store.kind = %q", StorePostgres)
	}
	if s.AdvertiseURL != "" {
		if u, err := url.Parse(s.AdvertiseURL); err != nil || u.Scheme != "https" || u.Host == "" {
			bad("store.advertise_url %q: want https://host:port", s.AdvertiseURL)
		}
	}
	if s.LeaseTTLMillis < 0 || s.LeaseTTLMillis > 0 && s.LeaseTTLMillis < 300 {
		bad("store.lease_ttl_ms must be at least 300")
	}
	switch s.Kind {
	case "", StoreBolt, StoreMem:
		if s.DSN != "" || s.DSNFile != "" {
			bad("store.dsn and store.dsn_file need store.kind = %q", StorePostgres)
		}
		if s.Kind == StoreMem && s.Path != "" {
			bad("store.path is for kind %q", StoreBolt)
		}
	case StorePostgres:
		if (s.DSN == "") == (s.DSNFile == "") {
			bad("store.kind = %q needs exactly one of store.dsn and store.dsn_file", StorePostgres)
		}
		if s.Path != "" {
			bad("store.path is for kind %q", StoreBolt)
		}
	default:
		bad("store.kind %q: want %q, %q or %q", s.Kind, StoreBolt, StorePostgres, StoreMem)
	}
}

// storeLocation returns where the store lives, as [store.Open] takes it;
// for a DSN in a file see [Config.openLocation].
func (c *Config) storeLocation() string {
	switch {
	case c.Store.Kind == StoreMem:
		return "mem:"
	case c.Store.Kind == StorePostgres:
		return "postgres:" + c.Store.DSN
	case c.Store.Path != "":
		return c.Store.Path
	}
	return filepath.Join(c.StateDir, "hub.db")
}

// openLocation is [Config.storeLocation] with store.dsn_file read, which
// is refused when group or others may read it.
func (c *Config) openLocation() (string, error) {
	if c.Store.Kind != StorePostgres || c.Store.DSNFile == "" {
		return c.storeLocation(), nil
	}
	fi, err := os.Stat(c.Store.DSNFile)
	if err != nil {
		return "", fmt.Errorf("hub: store.dsn_file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("hub: store.dsn_file %s has mode %04o: it holds a password, make it 0600", c.Store.DSNFile, perm)
	}
	b, err := os.ReadFile(c.Store.DSNFile)
	if err != nil {
		return "", fmt.Errorf("hub: store.dsn_file: %w", err)
	}
	dsn := strings.TrimSpace(string(b))
	if dsn == "" {
		return "", fmt.Errorf("hub: store.dsn_file %s is empty", c.Store.DSNFile)
	}
	return "postgres:" + dsn, nil
}
