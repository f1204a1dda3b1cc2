package journal

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
)

// Framing: every record on disk is
//
//	uint32 little-endian  payload length n (1 ≤ n ≤ MaxRecord)
//	uint32 little-endian  CRC-32C (Castagnoli) of the payload
//	n bytes               payload: one JSON object (record)
//
// A crash can leave the last frame short or its CRC wrong; replay stops there
// and truncates the file to the last whole record.

// MaxRecord is the largest payload accepted, in bytes. A start's spec must
// fit in it; a length field above it is read as corruption.
const MaxRecord = 16 << 20

const headerLen = 8

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Decoding errors.
var (
	// ErrShort means the buffer ends inside a frame: a torn tail.
	ErrShort = errors.New("journal: short record")
	// ErrCorrupt means a frame is malformed: bad length, CRC mismatch,
	// undecodable payload or unknown kind.
	ErrCorrupt = errors.New("journal: corrupt record")
)

// kind is a record's type.
type kind string

const (
	kindAccepted kind = "accepted" // job, reservation, spec
	kindRunning  kind = "running"  // job, stage
	kindFinished kind = "finished" // job, result; drops the spec (the file sheds it at the next compaction)
	kindRecorded kind = "recorded" // job
	kindForget   kind = "forget"   // job; drops the entry
)

// record is one journal record. Fields not used by its kind are empty.
type record struct {
	Kind        kind   `json:"k"`
	Job         string `json:"job"`
	Reservation string `json:"res,omitempty"`
	Spec        []byte `json:"spec,omitempty"`
	Stage       string `json:"stage,omitempty"`
	Result      []byte `json:"result,omitempty"`
}

func (r record) valid() bool {
	if r.Job == "" {
		return false
	}
	switch r.Kind {
	case kindAccepted, kindRunning, kindFinished, kindRecorded, kindForget:
		return true
	}
	return false
}

// encodeRecord returns r framed for disk.
func encodeRecord(r record) ([]byte, error) {
	p, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("journal: encode: %w", err)
	}
	if len(p) > MaxRecord {
		return nil, fmt.Errorf("journal: record of %d bytes exceeds %d: %w", len(p), MaxRecord, ErrCorrupt)
	}
	b := make([]byte, headerLen, headerLen+len(p))
	binary.LittleEndian.PutUint32(b[0:], uint32(len(p)))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(p, castagnoli))
	return append(b, p...), nil
}

// decodeRecord decodes the frame at the start of b, returning the record and
// the frame's length. It returns [ErrShort] when b ends inside the frame and
// [ErrCorrupt] when the frame is malformed; it never panics.
func decodeRecord(b []byte) (record, int, error) {
	if len(b) < headerLen {
		return record{}, 0, ErrShort
	}
	n := binary.LittleEndian.Uint32(b[0:])
	if n == 0 || n > MaxRecord {
		return record{}, 0, fmt.Errorf("%w: length %d", ErrCorrupt, n)
	}
	if uint64(len(b)-headerLen) < uint64(n) {
		return record{}, 0, ErrShort
	}
	p := b[headerLen : headerLen+int(n)]
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return record{}, 0, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	var r record
	if err := json.Unmarshal(p, &r); err != nil {
		return record{}, 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if !r.valid() {
		return record{}, 0, fmt.Errorf("%w: kind %q job %q", ErrCorrupt, r.Kind, r.Job)
	}
	return r, headerLen + int(n), nil
}
