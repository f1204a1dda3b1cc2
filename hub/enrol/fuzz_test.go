package enrol

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"testing"
)

func encodeKey(pub ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(pub) }

// DecodeJoin never panics, and what it accepts re-encodes to a body it
// accepts again with the same fields.
func FuzzDecodeJoin(f *testing.F) {
	pub := encodeKey(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey))
	for _, s := range []string{
		`{"token":"vkj_gitlab_x","public_key":"` + pub + `","name":"a","kind":"gitlab"}`,
		`{"token":"vkj_node_x","public_key":"` + pub + `","name":"node-1","kind":"node"}`,
		`{"token":"t","public_key":"AAAA","name":"a","kind":"gitlab"}`,
		`{"token":1}`, `[]`, `{}{}`, `{"name":"\u0000"}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeJoin(body)
		if err != nil {
			return
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeJoin(b)
		if err != nil || again != req {
			t.Fatalf("re-decode of accepted %q = %+v, %v", body, again, err)
		}
	})
}
