package journal

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecodeRecord feeds arbitrary bytes (a journal file's tail after any
// crash or disk fault) to the record decoder: it must never panic, must
// report a short or corrupt frame as such, and a frame it accepts must
// re-encode to a frame that decodes to the same record.
// spec: NODE-06
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []record{
		{Kind: kindAccepted, Job: "j1", Reservation: "r1", Spec: []byte(`{"a":1}`)},
		{Kind: kindRunning, Job: "j1", Stage: "build_script"},
		{Kind: kindFinished, Job: "j1", Result: []byte(`{"exit_code":1}`)},
		{Kind: kindRecorded, Job: "j1"},
		{Kind: kindForget, Job: "j1"},
	} {
		b, err := encodeRecord(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(b[:3])
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := decodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrShort) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is neither short nor corrupt", err)
			}
			return
		}
		if n < headerLen || n > len(b) {
			t.Fatalf("frame length %d outside [%d, %d]", n, headerLen, len(b))
		}
		enc, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, n2, err := decodeRecord(enc)
		if err != nil || n2 != len(enc) {
			t.Fatalf("re-decode = %v, %d of %d", err, n2, len(enc))
		}
		if diff := cmp.Diff(r, r2); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
