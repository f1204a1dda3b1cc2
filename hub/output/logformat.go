package output

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/vk-ci/vk/internal/logkey"
)

// The log's files (see the package doc, Files). A segment starts with
// segMagic; then records, each:
//
//	crc    uint32  CRC-32C of everything after it in the record
//	seg    uint32  the low 32 bits of the segment's number
//	kind   uint8   recAppend, recComplete or recDrop
//	jobLen uint8   length of the job ID
//	n      uint32  length of the data (0 unless recAppend)
//	off    uint64  the data's offset in the job's output
//	job    jobLen bytes
//	data   n bytes
//
// all little-endian. A segment is a new file allocated to its size
// (reading as zeros) or a removed segment's file renamed for reuse
// (newSegment), so the segment ends at a header of zeros or at a record
// that names another segment: one written before the file was reused.
// Replay stops there, or at the first record that is short or fails its
// checksum: a torn write at a crash, since nothing after it was acked.
const (
	segMagic      = "vk-out1\n"
	segSuffix     = ".log"
	recHeader     = 22
	maxRecordData = 1 << 20
)

// Record kinds.
const (
	recAppend   byte = 1
	recComplete byte = 2
	recDrop     byte = 3
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordSize is the size of a record for job with n bytes of data.
func recordSize(job string, n int) int64 { return int64(recHeader + len(job) + n) }

// appendRecord encodes a record of segment seg at the end of buf and
// returns buf and the offset in it of the record's data.
func appendRecord(buf []byte, seg uint64, kind byte, job string, off int64, data []byte) ([]byte, int64) {
	start := len(buf)
	buf = binary.LittleEndian.AppendUint32(buf, 0)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(seg))
	buf = append(buf, kind, byte(len(job)))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(data)))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(off))
	buf = append(buf, job...)
	pos := int64(len(buf))
	buf = append(buf, data...)
	binary.LittleEndian.PutUint32(buf[start:], crc32.Checksum(buf[start+4:], castagnoli))
	return buf, pos
}

// record is one decoded record.
type record struct {
	kind byte
	job  string
	off  int64
	pos  int64 // the data's position in the segment
	n    int64
}

// readRecords calls fn for each valid record of segment seg read from r
// (positioned just after the magic), in order. It returns the position
// just after the last valid record, and whether it stopped at a torn or
// corrupt record rather than at the segment's end.
func readRecords(r io.Reader, seg uint64, fn func(record)) (end int64, torn bool) {
	br := bufio.NewReaderSize(r, 64<<10)
	pos := int64(len(segMagic))
	var hdr [recHeader]byte
	var body []byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return pos, err != io.EOF
		}
		if hdr == [recHeader]byte{} || binary.LittleEndian.Uint32(hdr[4:]) != uint32(seg) {
			return pos, false // allocated space (zeros), or a record of the file's earlier use
		}
		kind, jl := hdr[8], int(hdr[9])
		n := int64(binary.LittleEndian.Uint32(hdr[10:]))
		off := int64(binary.LittleEndian.Uint64(hdr[14:]))
		if kind < recAppend || kind > recDrop || n > maxRecordData || (kind != recAppend && n != 0) || off < 0 {
			return pos, true
		}
		body = slices.Grow(body[:0], jl+int(n))[:jl+int(n)]
		if _, err := io.ReadFull(br, body); err != nil {
			return pos, true
		}
		crc := crc32.Update(crc32.Checksum(hdr[4:], castagnoli), castagnoli, body)
		job := string(body[:jl])
		if crc != binary.LittleEndian.Uint32(hdr[:4]) || !ValidJob(job) {
			return pos, true
		}
		fn(record{kind: kind, job: job, off: off, pos: pos + recHeader + int64(jl), n: n})
		pos += recHeader + int64(jl) + n
	}
}

// recover rebuilds the index from the segments in l.dir, imports outputs
// of the older format, and starts a new active segment. A job's output
// is every byte its append records hold after its last drop record,
// wherever they are: compaction writes copies of a job's bytes after
// later ones, and a copied segment may outlive its removal by a crash.
// Overlapping records hold the same bytes (each is what the node sent at
// that offset), so any of them serves.
func (l *Log) recover() error {
	names, err := l.dirf.Readdirnames(-1)
	if err != nil {
		return err
	}
	var ids []uint64
	var legacy []string
	for _, name := range names {
		if hex, ok := strings.CutSuffix(name, segSuffix); ok && len(hex) == 16 {
			if id, err := strconv.ParseUint(hex, 16, 64); err == nil {
				ids = append(ids, id)
				continue
			}
		}
		if strings.HasSuffix(name, freeSuffix) {
			if len(l.free) < keepFree {
				l.free = append(l.free, filepath.Join(l.dir, name))
			} else {
				os.Remove(filepath.Join(l.dir, name))
			}
			continue
		}
		if strings.HasSuffix(name, legacyOutSuffix) || strings.HasSuffix(name, legacyDoneSuffix) {
			legacy = append(legacy, name)
		}
	}
	slices.Sort(ids)
	raw := map[string]*rawJob{}
	for _, id := range ids {
		if err := l.replay(id, raw); err != nil {
			return err
		}
		l.nextID = id + 1
	}
	s, err := l.newSegment()
	if err != nil {
		return err
	}
	l.segs[s.id] = s
	l.active = s
	if len(legacy) > 0 {
		if err := l.importLegacy(legacy, raw); err != nil {
			return err
		}
	}
	for job, rj := range raw {
		l.jobs[job] = l.assemble(job, rj)
	}
	for _, s := range l.segs {
		l.removeIfDeadLocked(s)
	}
	if len(legacy) > 0 {
		for _, name := range legacy {
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if err := l.syncDir(); err != nil {
			return err
		}
		l.log.Info("output: imported the outputs of the one-file-per-job format", "files", len(legacy))
	}
	return nil
}

// rawJob is what replay found of a job: its extents in log order, and
// the segment of its latest completion mark.
type rawJob struct {
	ext  []extent
	mark *segment
}

// replay reads segment id into raw. A segment too short for its magic
// (a crash while creating it) is removed; one with another magic is an
// error, since the directory holds something else.
func (l *Log) replay(id uint64, raw map[string]*rawJob) error {
	path := filepath.Join(l.dir, segName(id))
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	var magic [len(segMagic)]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		f.Close()
		l.log.Warn("output: removing a segment cut off at its creation", "segment", segName(id))
		return os.Remove(path)
	}
	if string(magic[:]) != segMagic {
		f.Close()
		return fmt.Errorf("%s: not an output log segment", path)
	}
	s := &segment{id: id, f: f}
	l.segs[id] = s
	end, torn := readRecords(f, id, func(r record) {
		rj := raw[r.job]
		switch r.kind {
		case recAppend:
			if rj == nil {
				rj = &rawJob{}
				raw[r.job] = rj
			}
			if r.n > 0 {
				rj.ext = append(rj.ext, extent{off: r.off, seg: s, pos: r.pos, n: r.n})
			}
		case recComplete:
			if rj == nil {
				rj = &rawJob{}
				raw[r.job] = rj
			}
			rj.mark = s
		case recDrop:
			delete(raw, r.job)
		}
	})
	s.size = end
	if torn {
		l.log.Warn("output: segment ends in a torn record; the rest is ignored", "segment", segName(id), "at", end)
	}
	return nil
}

// assemble makes a job's index from its replayed extents: sorted by
// offset, overlaps cut, up to the first gap (which only a corrupt segment
// leaves).
func (l *Log) assemble(job string, rj *rawJob) *logJob {
	j := &logJob{grow: make(chan struct{}), complete: rj.mark != nil, mark: rj.mark}
	if rj.mark != nil {
		rj.mark.marks++
	}
	slices.SortStableFunc(rj.ext, func(a, b extent) int { return cmp.Compare(a.off, b.off) })
	for _, e := range rj.ext {
		if e.off > j.length {
			l.log.Error("output: a job's output has a gap in the log; the rest is lost", logkey.JobID, job, "at", j.length)
			break
		}
		if e.off+e.n <= j.length {
			continue
		}
		skip := j.length - e.off
		e.off, e.pos, e.n = j.length, e.pos+skip, e.n-skip
		j.ext = append(j.ext, e)
		e.seg.live += e.n
		j.length += e.n
	}
	return j
}

// The one-file-per-job format (issue 22, sessions 6 to 10): <job>.out
// held a job's bytes and was made read-only when complete; before that a
// second, empty <job>.done marked completion.
const (
	legacyOutSuffix  = ".out"
	legacyDoneSuffix = ".done"
)

// importLegacy copies the outputs of the older format into the active
// segment, with their completion marks, and syncs it; the caller then
// removes the old files. A crash before the removal is durable imports
// them again, which only repeats bytes the log already holds.
func (l *Log) importLegacy(names []string, raw map[string]*rawJob) error {
	s := l.active
	done := map[string]bool{}
	for _, name := range names {
		if job, ok := strings.CutSuffix(name, legacyDoneSuffix); ok {
			done[job] = true
		}
	}
	var buf []byte
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		_, err := s.f.WriteAt(buf, s.size)
		s.size += int64(len(buf))
		buf = buf[:0]
		return err
	}
	seen := map[string]bool{}
	for _, name := range names {
		job, ok := strings.CutSuffix(name, legacyOutSuffix)
		if !ok {
			job, _ = strings.CutSuffix(name, legacyDoneSuffix)
		}
		if !ValidJob(job) || seen[job] {
			continue
		}
		seen[job] = true
		rj := raw[job]
		if rj == nil {
			rj = &rawJob{}
			raw[job] = rj
		}
		complete := done[job]
		f, err := os.Open(filepath.Join(l.dir, job+legacyOutSuffix))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		default:
			fi, err := f.Stat()
			if err != nil {
				f.Close()
				return err
			}
			complete = complete || isComplete(fi.Mode())
			data := make([]byte, maxRecordData)
			for off := int64(0); ; {
				n, err := f.ReadAt(data, off)
				if n > 0 {
					var pos int64
					buf, pos = appendRecord(buf, s.id, recAppend, job, off, data[:n])
					rj.ext = append(rj.ext, extent{off: off, seg: s, pos: s.size + pos, n: int64(n)})
					off += int64(n)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					f.Close()
					return err
				}
				if len(buf) >= 4*maxRecordData {
					if err := flush(); err != nil {
						f.Close()
						return err
					}
				}
			}
			f.Close()
		}
		if complete {
			buf, _ = appendRecord(buf, s.id, recComplete, job, 0, nil)
			rj.mark = s
		}
	}
	if err := flush(); err != nil {
		return err
	}
	return syncFile(s.f)
}

// isComplete reports whether an older-format data file's mode marks it
// complete (read-only for its owner).
func isComplete(m fs.FileMode) bool { return m.Perm()&0o200 == 0 }
