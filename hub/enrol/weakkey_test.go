package enrol

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/store"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/reqsign"
)

// weakKeys are public keys join must refuse: with the identity (and the
// other small-order points) a constant signature verifies without any
// private key; non-canonical encodings are a second spelling of a point.
var weakKeys = []struct{ name, hex string }{
	{"all zeros", strings.Repeat("00", 32)},
	{"identity", "01" + strings.Repeat("00", 31)},
	{"0xff x 32", strings.Repeat("ff", 32)},
	{"order 2", "ec" + strings.Repeat("ff", 30) + "7f"},
	{"order 4 negative", strings.Repeat("00", 31) + "80"},
	{"order 8 a", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a"},
	{"order 8 b", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa"},
	{"order 8 c", "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"},
	{"order 8 d", "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85"},
	{"non-canonical identity (y = p+1)", "ee" + strings.Repeat("ff", 30) + "7f"},
	{"identity with the sign bit", "01" + strings.Repeat("00", 30) + "80"},
	{"not a point", "02" + strings.Repeat("00", 31)},
}

// TestJoinRefusesWeakKeys: POST /v1/join with a weak key answers 400
// invalid naming the key, spends no token and enrols nothing; the same
// token then joins with a real key.
//
// spec: AUTH-08, API-46
func TestJoinRefusesWeakKeys(t *testing.T) {
	h := newTestHub(t)
	tok := h.token(t, store.KindRelay, 0)
	cfg, err := pki.ClientConfig(h.bundle.CACertPEM, "")
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	post := func(pub []byte) (int, client.Error) {
		body, _ := json.Marshal(map[string]string{"token": tok, "public_key": base64.StdEncoding.EncodeToString(pub),
			"name": "ci-1.example", "kind": "gitlab"})
		resp, err := hc.Post(h.srv.URL+"/v1/join", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e client.Error
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e
	}
	for _, k := range weakKeys {
		pub, _ := hex.DecodeString(k.hex)
		st, e := post(pub)
		if st != http.StatusBadRequest || e.Code != client.CodeInvalid || !strings.Contains(e.Error, "public_key refused") {
			t.Errorf("%s: join = %d %+v, want 400 invalid saying public_key refused", k.name, st, e)
		}
	}
	if ps, _ := h.st.ListPrincipals(t.Context()); len(ps) != 0 {
		t.Fatalf("principals after weak joins: %+v", ps)
	}
	key, _ := reqsign.GenerateKey()
	if st, e := post(key.Public().(ed25519.PublicKey)); st != http.StatusCreated {
		t.Fatalf("join with a real key after the refusals = %d %+v", st, e)
	}
}
