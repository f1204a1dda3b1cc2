package client

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeBodies: the hub decodes every request body a client sends and
// clients decode every answer. Decoding never panics, and whatever decodes
// re-encodes to bytes that decode to the same encoding again.
//
// spec: API-55, PROTO-02, PROTO-03, PROTO-04, PROTO-05, PROTO-06, PROTO-07
func FuzzDecodeBodies(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"placement":{"envelope":{"mem":-1}}}`))
	f.Add([]byte(`{"state":"finished","result":{"exit_code":null,"usage":{}}}`))
	targets := []func() any{
		func() any { return new(CapacityRequest) },
		func() any { return new(ReservationRequest) },
		func() any { return new(RenewRequest) },
		func() any { return new(OutcomeRequest) },
		func() any { return new(JobSubmission) },
		func() any { return new(CancelRequest) },
		func() any { return new(ClientHello) },
		func() any { return new(JobView) },
		func() any { return new(ReservationGrant) },
		func() any { return new(Capacity) },
		func() any { return new(Error) },
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, newT := range targets {
			v := newT()
			if json.Unmarshal(b, v) != nil {
				continue
			}
			enc, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%T: decoded %s but cannot encode it: %v", v, b, err)
			}
			w := newT()
			if err := json.Unmarshal(enc, w); err != nil {
				t.Fatalf("%T: decode of own encoding %s: %v", v, enc, err)
			}
			enc2, err := json.Marshal(w)
			if err != nil || string(enc2) != string(enc) {
				t.Fatalf("%T: unstable %s vs %s (%v)", v, enc, enc2, err)
			}
		}
	})
}
