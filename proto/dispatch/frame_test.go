package dispatch

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vk-ci/vk/internal/deptest"
	"github.com/vk-ci/vk/proto/client"
	"github.com/vk-ci/vk/proto/job"
	"pgregory.net/rapid"
)

// TestDeps fences proto/dispatch to the standard library (and proto itself).
//
// spec: PROTO-01
func TestDeps(t *testing.T) {
	deptest.StdlibOnly(t, "github.com/vk-ci/vk/proto/dispatch", "github.com/vk-ci/vk/proto/")
}

// allMessages returns one zero value of every message type, via the
// decoder's own table, so a new type is covered automatically.
func allMessages() []Message {
	var out []Message
	for _, ty := range []Type{TypeHello, TypeWelcome, TypeError, TypeKeepalive, TypeReport, TypeHeartbeat, TypeSettings} {
		out = append(out, newMessage(ty, ""))
	}
	for _, k := range []Kind{KindOffer, KindOfferReply, KindRenew, KindLease, KindRelease, KindStart, KindJob,
		KindOutput, KindOutputAck, KindCancel, KindResult, KindRecorded, KindHeld, KindEgress} {
		out = append(out, newMessage(TypeJob, k))
	}
	return out
}

// TestMessageTable: every type and kind maps to a message that reports it
// back, and no payload uses a header key.
//
// spec: NSESS-01
func TestMessageTable(t *testing.T) {
	for _, m := range allMessages() {
		if m == nil {
			t.Fatal("newMessage returned nil for a listed type")
		}
		if got := newMessage(m.FrameType(), m.FrameKind()); reflect.TypeOf(got) != reflect.TypeOf(m) {
			t.Errorf("%T reports %s/%s, which decodes as %T", m, m.FrameType(), m.FrameKind(), got)
		}
		if (m.FrameType() == TypeJob) != (m.FrameKind() != "") {
			t.Errorf("%T: type %q with kind %q", m, m.FrameType(), m.FrameKind())
		}
		rt := reflect.TypeOf(m).Elem()
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			for _, r := range []string{"type", "kind", "seq"} {
				if name == r {
					t.Errorf("%s.%s uses the header key %q", rt.Name(), rt.Field(i).Name, r)
				}
			}
		}
	}
}

// TestDecodeErrors: oversize input, unknown types and kinds, misplaced seq
// and malformed JSON are refused with typed errors.
//
// spec: NSESS-01, NSESS-15, NSESS-23
func TestDecodeErrors(t *testing.T) {
	big := `{"type":"report","seq":1,"host":"` + strings.Repeat("x", MaxFrameBytes) + `"}`
	for _, tc := range []struct {
		name string
		in   string
		want error
	}{
		{"oversize", big, ErrTooLarge},
		{"unknown type", `{"type":"gossip","seq":1}`, ErrUnknownType},
		{"unknown kind", `{"type":"job","kind":"migrate","seq":1}`, ErrUnknownType},
		{"job without kind", `{"type":"job","seq":1}`, ErrUnknownType},
		{"no type", `{"seq":1}`, ErrMalformed},
		{"not an object", `"hello"`, ErrMalformed},
		{"empty", ``, ErrMalformed},
		{"truncated", `{"type":"job","kind":"offer","seq":1,`, ErrMalformed},
		{"trailing data", `{"type":"keepalive"} x`, ErrMalformed},
		{"stateful without seq", `{"type":"job","kind":"offer","reservation":"r"}`, ErrMalformed},
		{"stateless with seq", `{"type":"hello","seq":1}`, ErrMalformed},
		{"bad base64", `{"type":"job","kind":"output","seq":1,"job":"j","offset":0,"data":"!!"}`, ErrMalformed},
		{"oversize chunk", `{"type":"job","kind":"output","seq":1,"job":"j","offset":0,"data":"` + b64(MaxOutputChunk+1) + `"}`, ErrTooLarge},
		{"bad size", `{"type":"job","kind":"offer","seq":1,"envelope":{"mem":"lots"}}`, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.in))
			if !errors.Is(err, tc.want) {
				t.Errorf("Decode = %v, want %v", err, tc.want)
			}
		})
	}
	var ue *UnknownTypeError
	if _, err := Decode([]byte(`{"type":"job","kind":"migrate","seq":1}`)); !errors.As(err, &ue) || ue.Kind != "migrate" || ue.Type != TypeJob {
		t.Errorf("UnknownTypeError = %+v", ue)
	}
}

func b64(n int) string {
	b, _ := json.Marshal(make([]byte, n))
	return strings.Trim(string(b), `"`)
}

// TestOutputChunkLimits: a 256 KiB raw chunk is encoded and decoded (and
// fits in a frame after base64); one byte more is refused both ways.
//
// spec: NSESS-15, NSESS-23
func TestOutputChunkLimits(t *testing.T) {
	data := make([]byte, MaxOutputChunk)
	for i := range data {
		data[i] = byte(i)
	}
	b, err := Encode(Frame{Seq: 1, Msg: &Output{Job: "job-1", Offset: 1 << 40, Data: data}})
	if err != nil {
		t.Fatalf("Encode of a full chunk: %v", err)
	}
	if len(b) > MaxFrameBytes {
		t.Fatalf("a full chunk encodes to %d bytes, over MaxFrameBytes", len(b))
	}
	f, err := Decode(b)
	if err != nil || string(f.Msg.(*Output).Data) != string(data) {
		t.Fatalf("Decode of a full chunk: %v", err)
	}
	for _, m := range []Message{&Output{Data: make([]byte, MaxOutputChunk+1)}, Output{Data: make([]byte, MaxOutputChunk+1)}} {
		if _, err := Encode(Frame{Seq: 1, Msg: m}); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Encode(%T of MaxOutputChunk+1) = %v, want ErrTooLarge", m, err)
		}
	}
	if MaxOutputChunk != 256<<10 || MaxFrameBytes != 1<<20 {
		t.Error("limits changed")
	}
}

// TestLargestSpecFitsAFrame: a start carrying a spec at the 512 KiB limit
// fits in one frame, even when its content needs JSON escapes.
//
// spec: NSESS-07, NSESS-23, API-35
func TestLargestSpecFitsAFrame(t *testing.T) {
	j := sampleSpec().GitLabCI
	j.Variables = append(j.Variables, job.Variable{Key: "PAD"})
	s := job.NewGitLabCI(j)
	n, _ := s.Size()
	// Control characters expand 6× when escaped but count as such in the
	// spec's own size, so the spec limit bounds the frame.
	j.Variables[len(j.Variables)-1].Value = strings.Repeat("\x01", (job.MaxSpecBytes-n)/6)
	if err := s.CheckSize(); err != nil {
		t.Fatal(err)
	}
	b, err := Encode(Frame{Seq: 1, Msg: &Start{Job: "job-1", Envelope: envelope, Spec: s}})
	if err != nil {
		t.Fatalf("Encode start with a %d-byte spec: %v", job.MaxSpecBytes, err)
	}
	if _, err := Decode(b); err != nil {
		t.Fatal(err)
	}
}

// TestEncodeErrors: nil messages and seq misuse are refused.
//
// spec: NSESS-01
func TestEncodeErrors(t *testing.T) {
	for _, f := range []Frame{
		{},
		{Seq: 1, Msg: Keepalive{}},
		{Seq: 2, Msg: &Hello{}},
		{Msg: &Offer{}},
		{Msg: Heartbeat{}},
	} {
		if _, err := Encode(f); !errors.Is(err, ErrMalformed) {
			t.Errorf("Encode(%+v) = %v, want ErrMalformed", f, err)
		}
	}
	if _, err := Encode(Frame{Seq: 1, Msg: &Report{Host: strings.Repeat("x", MaxFrameBytes)}}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Encode oversize = %v", err)
	}
	b, err := Encode(Frame{Msg: Keepalive{}})
	if err != nil || string(b) != `{"type":"keepalive"}` {
		t.Errorf("keepalive = %s, %v", b, err)
	}
}

// TestUnknownEnumsDecodeAsOther: refusal reasons, lease states, gone
// reasons, job states, node states and error codes this version does not
// know read as other.
//
// spec: NSESS-21, NSESS-22
func TestUnknownEnumsDecodeAsOther(t *testing.T) {
	for _, tc := range []struct {
		in    string
		check func(Message) bool
	}{
		{`{"type":"job","kind":"offer_reply","seq":1,"reservation":"r","reply":"refused","reason":"gpu"}`,
			func(m Message) bool { return m.(*OfferReply).Reason == RefusalOther }},
		{`{"type":"job","kind":"offer_reply","seq":1,"reservation":"r","reply":"deferred"}`,
			func(m Message) bool { return m.(*OfferReply).Reply == ReplyOther }},
		{`{"type":"job","kind":"lease","seq":1,"reservation":"r","state":"gone","why":"stolen"}`,
			func(m Message) bool { return m.(*Lease).Why == GoneOther }},
		{`{"type":"job","kind":"lease","seq":1,"reservation":"r","state":"frozen"}`,
			func(m Message) bool { return m.(*Lease).State == LeaseOther }},
		{`{"type":"job","kind":"job","seq":1,"job":"j","state":"paused","reason":"quota"}`,
			func(m Message) bool { u := m.(*JobUpdate); return u.State == JobStateOther && u.Reason == RefusalOther }},
		{`{"type":"job","kind":"cancel","seq":1,"job":"j","mode":"polite"}`,
			func(m Message) bool { return m.(*Cancel).Mode == client.CancelOther }},
		{`{"type":"heartbeat","seq":1,"state":"hibernating"}`,
			func(m Message) bool { return m.(*Heartbeat).State == NodeOther }},
		{`{"type":"error","code":"moved","message":"x"}`,
			func(m Message) bool { return m.(*ErrorFrame).Code == ErrorOther }},
	} {
		f, err := Decode([]byte(tc.in))
		if err != nil {
			t.Errorf("Decode(%s): %v", tc.in, err)
			continue
		}
		if !tc.check(f.Msg) {
			t.Errorf("Decode(%s) = %+v, want other", tc.in, f.Msg)
		}
	}
	// The known refusal reasons all decode as themselves.
	for _, r := range knownRefusals {
		var got RefusalReason
		if err := json.Unmarshal([]byte(`"`+string(r)+`"`), &got); err != nil || got != r {
			t.Errorf("reason %q decodes as %q", r, got)
		}
	}
}

// TestNegotiate: node-session ranges and the error naming both.
//
// spec: NSESS-03
func TestNegotiate(t *testing.T) {
	if v, err := Negotiate(HubVersions, NodeVersions); err != nil || v != Version {
		t.Errorf("Negotiate(hub, node) = %d, %v", v, err)
	}
	if v, err := Negotiate(HubVersions, Range{Min: 3, Max: 3}); err != nil || v != 3 {
		t.Errorf("Negotiate with a v3-only node = %d, %v", v, err)
	}
	if v, err := Negotiate(HubVersions, Range{Min: 1, Max: 9}); err != nil || v != Version {
		t.Errorf("Negotiate with a newer node = %d, %v", v, err)
	}
	_, err := Negotiate(HubVersions, Range{Min: 1, Max: 2})
	if !errors.Is(err, ErrVersion) {
		t.Fatalf("Negotiate with a jobless node = %v, want ErrVersion", err)
	}
	for _, s := range []string{"node session", "3..6", "1..2"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	var ve *client.VersionError
	if !errors.As(err, &ve) || ve.Remote != (Range{Min: 1, Max: 2}) {
		t.Errorf("VersionError = %+v", ve)
	}
}

// TestMinVersion: job messages need 3, egress 6.
//
// spec: NSESS-01, NSESS-02, NSESS-17, NSESS-20
func TestMinVersion(t *testing.T) {
	for _, m := range allMessages() {
		want := 1
		switch {
		case m.FrameKind() == KindEgress:
			want = 6
		case m.FrameType() == TypeJob:
			want = 3
		}
		if got := MinVersion(m); got != want {
			t.Errorf("MinVersion(%T) = %d, want %d", m, got, want)
		}
	}
	if MinVersion(&Result{}) != 3 {
		t.Error("result (which carries the final egress) must be sendable from 3")
	}
}

// TestRoundTripOutput: any output chunk within the limit survives.
//
// spec: NSESS-15
func TestRoundTripOutput(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := &Output{
			Job:    rapid.StringMatching(`[a-z0-9-]{1,20}`).Draw(t, "job"),
			Offset: rapid.Int64Range(0, 1<<50).Draw(t, "off"),
			Data:   rapid.SliceOfN(rapid.Byte(), 1, 4096).Draw(t, "data"),
		}
		seq := rapid.Uint64Range(1, 1<<63).Draw(t, "seq")
		b, err := Encode(Frame{Seq: seq, Msg: o})
		if err != nil {
			t.Fatal(err)
		}
		f, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		got := f.Msg.(*Output)
		if f.Seq != seq || got.Job != o.Job || got.Offset != o.Offset || string(got.Data) != string(o.Data) {
			t.Fatalf("round trip: %+v → %+v", o, got)
		}
	})
}

// FuzzDecode: the hub and the node decode every frame their peer sends.
// Decoding never panics, never accepts an oversize frame or chunk, and what
// decodes re-encodes stably.
//
// spec: NSESS-01, NSESS-15, NSESS-23
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"type":"job","kind":"output","seq":1,"data":null}`))
	f.Add([]byte(`{"type":"job","kind":"start","seq":1,"spec":{"kind":"gitlab_ci","gitlab_ci":null}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Decode(b)
		if err != nil {
			return
		}
		if len(b) > MaxFrameBytes {
			t.Fatalf("accepted %d bytes", len(b))
		}
		if o, ok := fr.Msg.(*Output); ok && len(o.Data) > MaxOutputChunk {
			t.Fatalf("accepted a %d-byte chunk", len(o.Data))
		}
		enc, err := Encode(fr)
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return // escaping may grow a frame near the limit
			}
			t.Fatalf("re-encode: %v", err)
		}
		fr2, err := Decode(enc)
		if err != nil {
			t.Fatalf("decode of own encoding %s: %v", enc, err)
		}
		enc2, err := Encode(fr2)
		if err != nil || string(enc2) != string(enc) {
			t.Fatalf("unstable: %s vs %s (%v)", enc, enc2, err)
		}
	})
}

// TestStartRedacted: a journaled or logged start keeps no secret.
//
// spec: AUTH-07, XFER-16
func TestStartRedacted(t *testing.T) {
	s := Start{Job: "job-1", Envelope: envelope, Spec: sampleSpec(), Cache: &CacheRegistry{Repository: "ci-cache/x/1", Token: "reg-SECRET"}}
	r := s.Redacted()
	b, _ := json.Marshal(r)
	for _, secret := range []string{"reg-SECRET", "glcbt-secret"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("redacted start holds %q: %s", secret, b)
		}
	}
	if s.Cache.Token != "reg-SECRET" || s.Spec.GitLabCI.Token != "glcbt-secret" {
		t.Error("Redacted modified the original")
	}
	if r.Cache.Repository != "ci-cache/x/1" || r.Job != "job-1" {
		t.Errorf("Redacted dropped non-secrets: %+v", r)
	}
}

// TestEveryMessageHasGolden: each message type is pinned by at least one
// golden file, so a new type cannot ship without one.
//
// spec: PROTO-01
func TestEveryMessageHasGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[reflect.Type]bool{}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		pinned[reflect.TypeOf(f.Msg)] = true
	}
	for _, m := range allMessages() {
		if !pinned[reflect.TypeOf(m)] {
			t.Errorf("%T has no golden file in testdata", m)
		}
	}
}
