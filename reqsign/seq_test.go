package reqsign

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"net/http"
	"testing"

	"pgregory.net/rapid"
)

// spec: AUTH-11
func TestParseSeq(t *testing.T) {
	tests := []struct {
		name string
		vals []string // nil: no vk-seq header
		want uint64
		err  error
	}{
		{"absent is v1", nil, 0, nil},
		{"one", []string{"1"}, 1, nil},
		{"largest", []string{"9223372036854775807"}, 1<<63 - 1, nil},
		{"zero refused", []string{"0"}, 0, ErrMalformed},
		{"leading zero refused", []string{"01"}, 0, ErrMalformed},
		{"empty refused", []string{""}, 0, ErrMalformed},
		{"sign refused", []string{"+1"}, 0, ErrMalformed},
		{"over 2^63-1 refused", []string{"9223372036854775808"}, 0, ErrMalformed},
		{"two values refused", []string{"1", "2"}, 0, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			SetHeaders(h, "relay-1", t0, "c2ln")
			for _, v := range tt.vals {
				h.Add(HeaderSeq, v)
			}
			got, err := ParseHeaders(h)
			if tt.err == nil && err != nil || tt.err != nil && !errors.Is(err, tt.err) {
				t.Fatalf("ParseHeaders = %v, want %v", err, tt.err)
			}
			if err == nil && got.Seq != tt.want {
				t.Errorf("Seq = %d, want %d", got.Seq, tt.want)
			}
		})
	}
}

// spec: AUTH-12, AUTH-14
// A v2 signature commits to its sequence number: it verifies for that
// number only, never as v1 or for another number, and v1 and v2 messages
// of the same fields differ.
func TestSeqSigned(t *testing.T) {
	key := fixedKey(1)
	pub := key.Public().(ed25519.PublicKey)
	ekm := make([]byte, ExporterLen)
	rapid.Check(t, func(t *rapid.T) {
		seq := rapid.Uint64Range(1, 1<<63-1).Draw(t, "seq")
		other := rapid.Uint64Range(0, 1<<63-1).Filter(func(n uint64) bool { return n != seq }).Draw(t, "other")
		body := rapid.SliceOf(rapid.Byte()).Draw(t, "body")
		sig := SignSeq(key, "relay-1", "POST", "/v1/jobs", body, t0, seq, ekm)
		if err := VerifySeq(pub, "relay-1", "POST", "/v1/jobs", body, t0, seq, ekm, sig, t0, 0); err != nil {
			t.Fatalf("own sequence refused: %v", err)
		}
		if err := VerifySeq(pub, "relay-1", "POST", "/v1/jobs", body, t0, other, ekm, sig, t0, 0); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("signature of %d verified for %d: %v", seq, other, err)
		}
	})
}

// spec: AUTH-14
// Per connection, CheckSeq accepts strictly increasing sequence numbers
// only; v1 (0) only first; without a record, v1 only.
func TestCheckSeq(t *testing.T) {
	tests := []struct {
		name  string
		seqs  []uint64
		oks   []bool
		track bool
	}{
		{"increasing", []uint64{1, 2, 3, 10}, []bool{true, true, true, true}, true},
		{"same twice", []uint64{1, 2, 2, 3}, []bool{true, true, false, true}, true},
		{"going back", []uint64{5, 4}, []bool{true, false}, true},
		{"v1 once", []uint64{0, 0}, []bool{true, false}, true},
		{"v1 then v2", []uint64{0, 1}, []bool{true, true}, true},
		{"v2 then v1", []uint64{1, 0}, []bool{true, false}, true},
		{"untracked v1", []uint64{0, 0}, []bool{true, true}, false},
		{"untracked v2", []uint64{1}, []bool{false}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.track {
				ctx = TrackConn(ctx)
			}
			for i, seq := range tt.seqs {
				err := CheckSeq(ctx, seq)
				if tt.oks[i] && err != nil || !tt.oks[i] && !errors.Is(err, ErrReplay) {
					t.Fatalf("request %d (seq %d): %v, want ok=%v", i, seq, err, tt.oks[i])
				}
			}
		})
	}
	// A refused number does not move the record.
	ctx := TrackConn(context.Background())
	_ = CheckSeq(ctx, 3)
	_ = CheckSeq(ctx, 2)
	if err := CheckSeq(ctx, 4); err != nil {
		t.Fatalf("4 after 3: %v", err)
	}
}

// spec: AUTH-14
// ConnExporter hands out a connection's own exporter value only: over
// real TLS connections, the value remembered in one connection's record
// is that connection's (equal to Exporter's, on the client's side too),
// another connection state given the same record gets its own value, not
// the remembered one, and a context without a record derives it afresh.
// (That a signature still verifies on its own connection only, with the
// hub's verifier remembering exporters, is TestKeptAliveSignatureOtherConnection
// and TestInStreamReplay: VerifyRequest uses ConnExporter.)
func TestConnExporterOwnConnectionOnly(t *testing.T) {
	s := newSignedServer(t, nil, t0)
	a, b := s.keep(t, s.client), s.keep(t, s.client)
	if bytes.Equal(a.ekm, b.ekm) {
		t.Fatal("two connections share an exporter value: the test proves nothing")
	}
	ctx := TrackConn(context.Background())
	for i, tc := range []struct {
		cs   *tls.ConnectionState
		want []byte
	}{{&a.cs, a.ekm}, {&a.cs, a.ekm}, {&b.cs, b.ekm}, {&a.cs, a.ekm}} {
		got, err := ConnExporter(ctx, tc.cs)
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Fatalf("call %d: ConnExporter = %x, %v; want %x", i, got, err, tc.want)
		}
	}
	if got, err := ConnExporter(context.Background(), &b.cs); err != nil || !bytes.Equal(got, b.ekm) {
		t.Fatalf("without a record: %x, %v; want %x", got, err, b.ekm)
	}
	if _, err := ConnExporter(ctx, &tls.ConnectionState{}); !errors.Is(err, ErrNoTLS) {
		t.Fatalf("an unfinished handshake: %v, want %v", err, ErrNoTLS)
	}
	if _, err := ConnExporter(ctx, nil); !errors.Is(err, ErrNoTLS) {
		t.Fatalf("no TLS: %v, want %v", err, ErrNoTLS)
	}
}
