package output

import (
	"cmp"
	"slices"

	"github.com/vk-ci/vk/internal/logkey"
)

// The writer: one goroutine takes every request queued since its last
// group, writes their records at the end of the active segment with one
// write, makes them durable with one sync, and only then indexes the
// bytes and answers the appends. Appends that arrive while a group is
// being synced form the next group, so under load a sync carries many
// jobs' chunks; alone, an append costs one write and one sync, as a file
// per job did.

// run is the writer's loop; it ends once Close was called and the queue
// is empty.
func (l *Log) run() {
	defer close(l.stopped)
	for {
		l.mu.Lock()
		for len(l.queue) == 0 && !l.closed {
			l.work.Wait()
		}
		if len(l.queue) == 0 {
			l.mu.Unlock()
			return
		}
		batch := l.queue
		l.queue = nil
		copies := l.pickCopiesLocked()
		l.mu.Unlock()
		l.commit(batch, copies)
	}
}

// commit writes one group: the batch's records, then the compaction
// copies'. On failure it fails the batch's appends and starts a new
// segment for the next group (the failed one may hold part of the group:
// whatever of it comes back after a crash is bytes the nodes sent at
// those offsets, which replay takes or trims as a resend; see the package
// doc).
func (l *Log) commit(batch []*request, copies []copyReq) {
	err := l.readCopies(copies)
	if err != nil {
		l.log.Warn("output: compaction read failed; copies skipped", logkey.Err, err)
		l.dropCopies(copies)
		copies = nil
		err = nil
	}
	// The group goes to a new segment if it would not fit in what the
	// active one has written ahead (unless the active one is empty).
	var need int64
	for _, r := range batch {
		need += recordSize(r.job, len(r.data)) + int64(len(r.data)/maxRecordData)*recordSize(r.job, 0)
	}
	for _, c := range copies {
		need += recordSize(c.job, len(c.data))
	}
	l.mu.Lock()
	seg := l.active
	l.mu.Unlock()
	if seg == nil || (seg.size+need > seg.cap && seg.size > int64(len(segMagic))) {
		seg, err = l.roll()
	}
	wait := len(copies) > 0
	if err == nil {
		buf := l.buf[:0]
		for _, r := range batch {
			switch r.kind {
			case recAppend:
				wait = true
				for off, rest := r.off, r.data; len(rest) > 0; {
					n := min(len(rest), maxRecordData)
					var pos int64
					buf, pos = appendRecord(buf, seg.id, recAppend, r.job, off, rest[:n])
					r.placed = append(r.placed, extent{off: off, seg: seg, pos: seg.size + pos, n: int64(n)})
					off += int64(n)
					rest = rest[n:]
				}
			default:
				buf, _ = appendRecord(buf, seg.id, r.kind, r.job, 0, nil)
			}
		}
		for i := range copies {
			c := &copies[i]
			if c.mark {
				buf, _ = appendRecord(buf, seg.id, recComplete, c.job, 0, nil)
				continue
			}
			var pos int64
			buf, pos = appendRecord(buf, seg.id, recAppend, c.job, c.from.off, c.data)
			c.to = extent{off: c.from.off, seg: seg, pos: seg.size + pos, n: c.from.n}
		}
		if cap(buf) <= 4*compactPerGroup {
			l.buf = buf
		}
		_, err = seg.f.WriteAt(buf, seg.size)
		if err == nil && wait {
			err = syncFile(seg.f)
		}
		if err != nil {
			l.failSegment(seg, err)
		} else {
			l.apply(seg, int64(len(buf)), batch, copies, wait)
		}
	}
	if err != nil {
		l.dropCopies(copies)
		for _, r := range batch {
			if r.done != nil {
				r.done <- err
			}
		}
		return
	}
	for _, r := range batch {
		if r.done != nil {
			r.done <- nil
		}
	}
}

// apply indexes a group that is written (and durable, if wait): each
// append's bytes join its job, each mark is placed, each copy replaces
// the extent it moved.
func (l *Log) apply(seg *segment, n int64, batch []*request, copies []copyReq, synced bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seg.size += n
	l.stats.Groups++
	if synced {
		l.stats.Syncs++
	}
	for _, r := range batch {
		j := r.j
		switch r.kind {
		case recAppend:
			l.stats.Appends++
			if j.dropped {
				continue
			}
			for _, e := range r.placed {
				j.ext = append(j.ext, e)
				e.seg.live += e.n
				j.length = e.off + e.n
			}
			j.notifyLocked()
		case recComplete:
			if j.dropped {
				continue
			}
			if j.mark != nil {
				j.mark.marks--
				l.removeIfDeadLocked(j.mark)
			}
			j.mark = seg
			seg.marks++
		}
	}
	for _, c := range copies {
		l.releaseLocked(c.from.seg)
		if c.j.dropped {
			continue
		}
		if c.mark {
			if c.j.mark == c.from.seg {
				c.j.mark = seg
				seg.marks++
				c.from.seg.marks--
				l.removeIfDeadLocked(c.from.seg)
			}
			continue
		}
		i, found := slices.BinarySearchFunc(c.j.ext, c.from.off, func(e extent, off int64) int { return cmp.Compare(e.off, off) })
		if !found || c.j.ext[i].seg != c.from.seg {
			continue
		}
		c.j.ext[i] = c.to
		c.to.seg.live += c.to.n
		c.from.seg.live -= c.from.n
		l.stats.Compacted += c.to.n
		l.removeIfDeadLocked(c.from.seg)
	}
}

// failSegment handles a failed write or sync: the segment is cut back to
// its last good size (best effort) and the writer moves to a new one,
// since after a failed sync the file's cached state cannot be trusted.
func (l *Log) failSegment(seg *segment, err error) {
	l.log.Error("output: write failed; starting a new segment", "segment", segName(seg.id), logkey.Err, err)
	if terr := seg.f.Truncate(seg.size); terr != nil {
		l.log.Error("output: truncate after failed write", "segment", segName(seg.id), logkey.Err, terr)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active == seg {
		l.active = nil
		l.removeIfDeadLocked(seg)
	}
}

// roll starts a new active segment (the one prepare made ready),
// removing the old one if nothing in it is still owned.
func (l *Log) roll() (*segment, error) {
	var sp spare
	select {
	case sp = <-l.spare:
	case <-l.prepared: // closing
		return nil, ErrClosed
	}
	s, err := sp.s, sp.err
	if err != nil {
		l.log.Error("output: cannot start a segment", logkey.Err, err)
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.active
	l.active = s
	l.segs[s.id] = s
	if old != nil {
		l.removeIfDeadLocked(old)
	}
	return s, nil
}

// pickCopiesLocked chooses what this group copies out of old segments:
// up to compactPerGroup bytes of the oldest segment whose live bytes are
// under a quarter of its size. A long-running job's few bytes would
// otherwise keep every segment written during its life; with this, the
// segments hold at most about four times the live output, plus the
// active one and the one before it. That one is left alone: most of the
// jobs still owning bytes in it are about to be settled, and copying
// their bytes would only write them twice. The caller holds l.mu.
func (l *Log) pickCopiesLocked() []copyReq {
	var victim *segment
	for _, s := range l.segs {
		if l.active == nil || s.id+1 >= l.active.id || s.removed || s.live*4 >= s.size {
			continue
		}
		if victim == nil || s.id < victim.id {
			victim = s
		}
	}
	if victim == nil {
		return nil
	}
	var copies []copyReq
	var total int64
	for job, j := range l.jobs {
		if j.mark == victim {
			copies = append(copies, copyReq{job: job, j: j, mark: true, from: extent{seg: victim}})
			victim.refs++
		}
		for _, e := range j.ext {
			if e.seg != victim {
				continue
			}
			copies = append(copies, copyReq{job: job, j: j, from: e})
			victim.refs++
			total += e.n
			if total >= compactPerGroup {
				return copies
			}
		}
	}
	return copies
}

// readCopies reads each copy's bytes from its segment.
func (l *Log) readCopies(copies []copyReq) error {
	for i := range copies {
		c := &copies[i]
		if c.mark {
			continue
		}
		c.data = make([]byte, c.from.n)
		if _, err := c.from.seg.f.ReadAt(c.data, c.from.pos); err != nil {
			return err
		}
	}
	return nil
}

// dropCopies gives up copies not made, releasing their segments.
func (l *Log) dropCopies(copies []copyReq) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range copies {
		l.releaseLocked(c.from.seg)
	}
}
