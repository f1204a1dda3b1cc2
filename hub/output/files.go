package output

import (
	"errors"
	"io/fs"
	"os"
)

// DefaultMaxOpen is how many jobs' output files a [Dir] keeps open at
// once by default.
const DefaultMaxOpen = 256

// Open files. A job's data file stays open between operations (appends
// of a running job's chunks and the reads that follow them), so a chunk
// costs a write and an fsync, not an open, a write, an fsync and a close.
// At most maxOpen files are kept, least recently used first out; Drop
// (settle) and Close close them. When every kept file is busy (another
// operation holds its job), an operation opens its own file and closes it
// afterwards, as every operation did before. Keeping a file open changes
// nothing on disk: each Append still fsyncs before it returns.

// fileLocked returns the job's data file (read-write), opening it unless
// it is kept open already; with create, a missing file is created
// (created then reports it). The caller holds j.mu and hands the file
// back with releaseLocked.
func (d *Dir) fileLocked(job string, j *jobOut, create bool) (f *os.File, created bool, err error) {
	if j.f != nil {
		d.mu.Lock()
		if j.elem != nil {
			d.open.MoveToFront(j.elem)
		}
		d.mu.Unlock()
		return j.f, false, nil
	}
	path := d.dataPath(job)
	f, err = os.OpenFile(path, os.O_RDWR, 0)
	if create && errors.Is(err, fs.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		created = true
	}
	if err != nil {
		return nil, false, err
	}
	if d.keep(j) {
		j.f = f
	}
	return f, created, nil
}

// releaseLocked ends an operation's use of f: a file not kept open is
// closed.
func (d *Dir) releaseLocked(j *jobOut, f *os.File) error {
	if f == j.f {
		return nil
	}
	return f.Close()
}

// forgetLocked closes the job's kept file, if any (Drop, a failed write).
func (d *Dir) forgetLocked(j *jobOut) {
	if j.f == nil {
		return
	}
	d.mu.Lock()
	if j.elem != nil {
		d.open.Remove(j.elem)
		j.elem = nil
	}
	d.mu.Unlock()
	j.f.Close()
	j.f = nil
}

// keep makes room for j's file among the kept ones and reports whether j
// may keep it. The caller holds j.mu. To make room it closes the least
// recently used file whose job no operation holds: it only tries each
// job's lock while holding d.mu, so it never waits on a job while others
// wait on d.mu.
func (d *Dir) keep(j *jobOut) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.maxOpen <= 0 {
		return false
	}
	for e := d.open.Back(); e != nil && d.open.Len() >= d.maxOpen; {
		old := e.Value.(*jobOut)
		e = e.Prev()
		if old == j || !old.mu.TryLock() {
			continue
		}
		d.open.Remove(old.elem)
		old.elem = nil
		old.f.Close()
		old.f = nil
		old.mu.Unlock()
	}
	if d.open.Len() >= d.maxOpen {
		return false
	}
	j.elem = d.open.PushFront(j)
	return true
}

// closeFiles closes every kept file (Close). The caller set d.closed, so
// no file is kept from now on.
func (d *Dir) closeFiles() {
	d.mu.Lock()
	var jobs []*jobOut
	for e := d.open.Front(); e != nil; e = e.Next() {
		j := e.Value.(*jobOut)
		j.elem = nil
		jobs = append(jobs, j)
	}
	d.open.Init()
	d.mu.Unlock()
	for _, j := range jobs {
		j.mu.Lock()
		if j.f != nil {
			j.f.Close()
			j.f = nil
		}
		j.mu.Unlock()
	}
}

// NumOpen returns how many output files the Dir keeps open.
func (d *Dir) NumOpen() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.open.Len()
}
