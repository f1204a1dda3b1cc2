package frame

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// TestDecodeHeaderOrder: header keys first (our encoding) or anywhere else
// (another encoder) read the same.
//
// spec: NSESS-01
func TestDecodeHeaderOrder(t *testing.T) {
	want := Header{Type: "job", Kind: "output", Seq: 7}
	for _, in := range []string{
		`{"type":"job","kind":"output","seq":7,"data":"AA=="}`,
		`{"seq":7,"kind":"output","type":"job"}`,
		`{"data":"AA==","type":"job","seq":7,"kind":"output"}`,
		`{"type":"job","data":"AA==","kind":"output","seq":7}`,
	} {
		got, err := DecodeHeader([]byte(in), 1<<20)
		if err != nil || got != want {
			t.Errorf("DecodeHeader(%s) = %+v, %v, want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{`{"type":null}`, `{"type":3}`, `{}`, `{"kind":"x"}`, `[`, ``} {
		if _, err := DecodeHeader([]byte(in), 1<<20); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeHeader(%s) = %v, want ErrMalformed", in, err)
		}
	}
	if _, err := DecodeHeader([]byte(`{"type":"x"}`), 5); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversize = %v", err)
	}
}

// TestEncode: header first, payload flattened, empty payload allowed,
// non-object payloads refused.
//
// spec: NSESS-01
func TestEncode(t *testing.T) {
	b, err := Encode(Header{Type: "job", Kind: "ack", Seq: 2}, struct {
		Job string `json:"job"`
	}{"j"}, 100)
	if err != nil || string(b) != `{"type":"job","kind":"ack","seq":2,"job":"j"}` {
		t.Errorf("Encode = %s, %v", b, err)
	}
	if b, err := Encode(Header{Type: "keepalive"}, struct{}{}, 100); err != nil || string(b) != `{"type":"keepalive"}` {
		t.Errorf("Encode empty = %s, %v", b, err)
	}
	if _, err := Encode(Header{Type: "x"}, []int{1}, 100); !errors.Is(err, ErrMalformed) {
		t.Errorf("Encode array = %v", err)
	}
	if _, err := Encode(Header{Type: "x"}, map[string]string{"a": "bbbbbbbbbbbbbbbbbbbbbbb"}, 20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Encode oversize = %v", err)
	}
}

// topKeys counts the top-level keys of a JSON object.
func topKeys(b []byte) map[string]int {
	n := map[string]int{}
	d := json.NewDecoder(bytes.NewReader(b))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return n
	}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return n
		}
		n[k.(string)]++
		var skip json.RawMessage
		if d.Decode(&skip) != nil {
			return n
		}
	}
	return n
}

// FuzzDecodeHeader: the fast path agrees with a full decode on every valid
// input it accepts whose header keys are not repeated.
//
// spec: NSESS-01
func FuzzDecodeHeader(f *testing.F) {
	for _, s := range []string{`{"type":"job","kind":"output","seq":7,"data":"AA=="}`, `{"seq":1,"type":"a"}`, `{"type":"a","type":"b"}`, `{"type":"a"}x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := leadingHeader(b)
		if !ok || !json.Valid(b) {
			return
		}
		if k := topKeys(b); k["type"] > 1 || k["kind"] > 1 || k["seq"] > 1 {
			return // ambiguous; first wins on the fast path
		}
		var full Header
		if err := json.Unmarshal(b, &full); err != nil {
			return
		}
		if fast != full {
			t.Fatalf("fast header %+v, full %+v for %s", fast, full, b)
		}
	})
}
