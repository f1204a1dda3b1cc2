package output

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// fileLocked returns the job's data file (read-write, or read-only once
// complete), opening it unless it is kept open already; with create, a
// missing file is created (created then reports it). The caller holds
// j.mu and hands the file back with releaseLocked.
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
	flag := os.O_RDWR
	if j.complete {
		// Read-only on disk (its mark); nothing writes to it any more.
		flag = os.O_RDONLY
	}
	f, err = os.OpenFile(path, flag, 0)
	if create && errors.Is(err, fs.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, modeRunning)
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

// The format before issue 22 marked a complete output with a second,
// empty file, <job>.done, beside <job>.out.
const oldDoneSuffix = ".done"

// convertOldMarks turns each <job>.done left by an older hub into the
// read-only mode of <job>.out (creating an empty one for a job without
// output), then removes the .done files, so a hub upgraded in place serves
// its old jobs' output as complete. Each .out is marked and fsynced
// before its .done goes, and the directory is fsynced after the removals:
// a crash part way leaves marks that a second pass converts again.
func convertOldMarks(dir string, dirf *os.File) error {
	names, err := dirf.Readdirnames(-1)
	if err != nil {
		return err
	}
	removed := false
	for _, name := range names {
		job, ok := strings.CutSuffix(name, oldDoneSuffix)
		if !ok || !ValidJob(job) {
			continue
		}
		if err := markSynced(filepath.Join(dir, job+".out")); err != nil {
			return fmt.Errorf("converting %s: %w", name, err)
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed = true
	}
	if removed {
		return dirf.Sync()
	}
	return nil
}

// markSynced makes the data file at path read-only, creating it empty if
// missing, and fsyncs it; a file it creates is durable with its caller's
// directory fsync.
func markSynced(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, modeComplete)
	if err != nil {
		return err
	}
	err = f.Chmod(modeComplete)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// Sweep removes the outputs of the jobs keep refuses: the files a crash
// left behind, since a settle's unlink is not synced on its own (see the
// package doc, Durability), and those of jobs the hub's records do not
// know at all. The hub calls it once at start, before any output is
// read or written, with keep true for every unsettled job. It syncs the
// directory once, after the removals, and returns the jobs removed.
func (d *Dir) Sweep(ctx context.Context, keep func(job string) bool) ([]string, error) {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("output: sweep: %w", err)
	}
	var removed []string
	for _, e := range ents {
		job, ok := strings.CutSuffix(e.Name(), ".out")
		if !ok || !e.Type().IsRegular() || !ValidJob(job) || keep(job) {
			continue
		}
		if err := d.Drop(ctx, job); err != nil {
			return removed, fmt.Errorf("output: sweep: %w", err)
		}
		removed = append(removed, job)
	}
	if len(removed) > 0 {
		if err := d.syncDir(); err != nil {
			return removed, fmt.Errorf("output: sweep: %w", err)
		}
	}
	return removed, nil
}
