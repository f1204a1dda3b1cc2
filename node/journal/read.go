package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Read returns every job the journal in dir records, in acceptance order,
// without opening it for writing: the file is read once and replayed in
// memory, nothing is truncated, compacted or locked, so it may be called
// while a node writes the journal (a record being appended is a torn tail
// and left out). It is for tools and tests that check what a node ran; a
// running node keeps its journal open with [Open].
//
// A journal keeps at most [KeepRecorded] recorded jobs across compactions,
// so older ones may be gone. A missing file reads as no jobs.
func Read(dir string) ([]Entry, error) {
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: read: %w", err)
	}
	j := &Journal{entries: map[string]*Entry{}}
	for off := 0; off < len(data); {
		r, n, err := decodeRecord(data[off:])
		if err != nil {
			break // torn or corrupt tail: what Open would truncate
		}
		_ = j.apply(r) // a record out of order is skipped, as replay does
		off += n
	}
	return j.sortedLocked(func(*Entry) bool { return true }), nil
}
