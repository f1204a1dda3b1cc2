package conffile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type sample struct {
	Version int    `toml:"version"`
	Addr    string `toml:"addr"`
	Limit   int    `toml:"limit"`
	Runners []struct {
		Name string `toml:"name"`
	} `toml:"runners"`
}

func (s *sample) Validate() error {
	if s.Limit > 128 {
		return fmt.Errorf("limit %d is above 128", s.Limit)
	}
	return nil
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr []string // substrings; nil means success
		is      error
	}{
		{name: "ok", in: "version = 1\naddr = \"127.0.0.1:1\"\n"},
		{name: "defaults kept", in: "version = 1\n"},
		{name: "missing version", in: "addr = \"x\"\n", wantErr: []string{"t.toml", `missing required key "version"`}, is: ErrVersion},
		{name: "wrong version", in: "version = 7\n", wantErr: []string{`"version" is 7`, "version 1"}, is: ErrVersion},
		{name: "unknown key with line", in: "version = 1\n\naddres = \"x\"\n", wantErr: []string{"t.toml:3:", `unknown key "addres"`}},
		{name: "unknown nested key", in: "version = 1\n[[runners]]\nname = \"a\"\ntoken = \"x\"\n", wantErr: []string{"t.toml:4:", `"runners.token"`}},
		{name: "wrong type", in: "version = 1\nlimit = \"ten\"\n", wantErr: []string{"t.toml:2:", `"limit"`}},
		{name: "syntax", in: "version = 1\nlimit = \n", wantErr: []string{"t.toml:2:"}},
		{name: "validate", in: "version = 1\nlimit = 200\n", wantErr: []string{"t.toml: limit 200 is above 128"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &sample{Addr: "default"}
			err := Decode("t.toml", []byte(tt.in), s, 1)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Decode = %v, want nil", err)
				}
				if tt.name == "defaults kept" && s.Addr != "default" {
					t.Errorf("Addr = %q, want the default kept", s.Addr)
				}
				return
			}
			if err == nil {
				t.Fatalf("Decode = nil, want error containing %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Decode error %q does not contain %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
			}
		})
	}
}

func TestLoadMissing(t *testing.T) {
	err := Load(filepath.Join(t.TempDir(), "none.toml"), &sample{}, 1)
	if !errors.Is(err, ErrNoConfig) {
		t.Fatalf("Load(missing) = %v, want ErrNoConfig", err)
	}
}

func TestLoadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hub.toml")
	if err := os.WriteFile(p, []byte("version = 1\naddr = \"a\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var s sample
	if err := Load(p, &s, 1); err != nil || s.Addr != "a" {
		t.Fatalf("Load = %v, Addr %q", err, s.Addr)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("version = 1\naddr = \"x\"\n")
	f.Add("version = 1\n[[runners]]\nname = \"a\"\n")
	f.Add("addr = 1")
	f.Fuzz(func(t *testing.T, in string) {
		var s sample
		_ = Decode("f.toml", []byte(in), &s, 1) // must not panic
	})
}

// A value of the wrong type is named in TOML's words, not Go's: no
// struct, field or Go type names.
func TestTypeErrorsInOperatorWords(t *testing.T) {
	var c struct {
		Version int      `toml:"version"`
		Tick    int      `toml:"tick_ms"`
		Names   []string `toml:"names"`
		Sub     struct {
			On bool `toml:"on"`
		} `toml:"sub"`
	}
	for body, want := range map[string]string{
		"version = 1\ntick_ms = \"fast\"\n": `x.toml:2:11: key "tick_ms": want an integer, not a string`,
		"version = 1\nnames = 3\n":          `x.toml:2:9: key "names": want a list of strings, not an integer`,
		"version = 1\n[sub]\non = 2\n":      `x.toml:3:6: key "sub.on": want true or false, not an integer`,
	} {
		err := Decode("x.toml", []byte(body), &c, 1)
		if err == nil || err.Error() != want {
			t.Errorf("%q: %v\nwant %s", body, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "struct") || strings.Contains(err.Error(), "Tick")) {
			t.Errorf("%q: Go names in %v", body, err)
		}
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9100": true, "localhost:9100": true, "[::1]:9100": true, "127.9.9.9:1": true,
		"0.0.0.0:9100": false, ":9100": false, "10.0.0.1:9100": false, "127.0.0.1": false, "example.com:80": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
