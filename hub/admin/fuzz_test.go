package admin

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// DecodePolicy never panics on any file, and a policy it accepts encodes
// to a file it reads back unchanged.
func FuzzDecodePolicy(f *testing.F) {
	ex, err := os.ReadFile("testdata/example-policy.toml")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{string(ex), "version = 1\n", "version = 1\n[tenants.a.projects]\n",
		"version = 1\n[[headroom]]\npool='p'\nmem='1G'\ncpus=1\ndisk=1024\nslots=1\n", "version = 2\n", "x", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePolicy("f", data)
		if err != nil {
			return
		}
		b, err := EncodePolicy(p)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodePolicy("g", b)
		if err != nil {
			t.Fatalf("re-decode: %v\n%s", err, b)
		}
		if d := cmp.Diff(p, back, cmpEmpty, cmpEmptyMaps); d != "" {
			t.Fatalf("round trip (-want +got):\n%s", d)
		}
	})
}
