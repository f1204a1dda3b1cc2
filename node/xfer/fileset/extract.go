package fileset

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// MaxArchiveBytes caps every archive that touches the job's disk (a
// downloaded zip, a cache layer, an artifact archive before upload): 10 GiB
// (XFER-25).
const MaxArchiveBytes int64 = 10 << 30

var (
	// ErrUnsafePath is returned for an archive entry whose path is
	// absolute, climbs out of the root, or passes through a symlink.
	ErrUnsafePath = errors.New("fileset: unsafe path in archive")
	// ErrTooLarge is returned when data passes the cap given to a
	// [CapWriter] or an [Extractor].
	ErrTooLarge = errors.New("fileset: archive too large")
)

// Extractor writes archive entries below Root without ever leaving it.
//
// Rules: entry names are slash paths; absolute names, names with a ".."
// segment, and names whose parent directory inside Root is a symlink are
// refused with [ErrUnsafePath]. A symlink entry is created as a link with
// its target verbatim (it may point anywhere, as in gitlab-runner's
// archives) but is never followed by later entries. An existing file,
// link or empty directory at an entry's path is replaced.
type Extractor struct {
	// Root is the directory extracted into; it must exist.
	Root string
	// MaxBytes caps the total regular-file bytes written; 0 means
	// [MaxArchiveBytes].
	MaxBytes int64

	written int64
}

// Target validates rel and returns its path on disk.
func (x *Extractor) Target(rel string) (string, error) {
	rel = strings.ReplaceAll(rel, "\\", "/")
	clean := strings.TrimSuffix(rel, "/")
	if clean == "" || strings.HasPrefix(clean, "/") || path.IsAbs(clean) || filepath.VolumeName(clean) != "" {
		return "", fmt.Errorf("%w: %q", ErrUnsafePath, rel)
	}
	for _, seg := range strings.Split(clean, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%w: %q", ErrUnsafePath, rel)
		}
	}
	clean = path.Clean(clean)
	if clean == "." {
		return "", fmt.Errorf("%w: %q", ErrUnsafePath, rel)
	}
	// No existing parent may be a symlink (or a non-directory).
	cur := x.Root
	segs := strings.Split(clean, "/")
	for _, seg := range segs[:len(segs)-1] {
		cur = filepath.Join(cur, seg)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() {
			return "", fmt.Errorf("%w: %q passes through %s", ErrUnsafePath, rel, cur)
		}
	}
	return filepath.Join(x.Root, filepath.FromSlash(clean)), nil
}

// Dir creates directory rel (and missing parents).
func (x *Extractor) Dir(rel string, mode fs.FileMode) error {
	p, err := x.Target(rel)
	if err != nil {
		return err
	}
	if fi, err := os.Lstat(p); err == nil && !fi.IsDir() {
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	return os.MkdirAll(p, dirMode(mode))
}

// File writes regular file rel from r with mode's permission bits.
func (x *Extractor) File(rel string, mode fs.FileMode, r io.Reader) error {
	p, err := x.Target(rel)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := removeNonDir(p); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode.Perm()|0o200)
	if err != nil {
		return err
	}
	max := x.MaxBytes
	if max <= 0 {
		max = MaxArchiveBytes
	}
	cw := &CapWriter{W: f, N: max - x.written}
	n, err := io.Copy(cw, r)
	x.written += n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("extract %s: %w", rel, err)
	}
	return os.Chmod(p, mode.Perm())
}

// Symlink creates symlink rel pointing at target.
func (x *Extractor) Symlink(rel, target string) error {
	p, err := x.Target(rel)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := removeNonDir(p); err != nil {
		return err
	}
	return os.Symlink(target, p)
}

func removeNonDir(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return os.Remove(p) // only succeeds when empty
	}
	return os.Remove(p)
}

func dirMode(m fs.FileMode) fs.FileMode {
	if m.Perm() == 0 {
		return 0o755
	}
	return m.Perm() | 0o700
}

// CapWriter passes writes to W until N bytes in total, then fails with
// [ErrTooLarge] (having written nothing of the offending write).
type CapWriter struct {
	W io.Writer
	// N is the number of bytes still allowed.
	N int64
}

// Write implements io.Writer.
func (c *CapWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.N {
		return 0, ErrTooLarge
	}
	n, err := c.W.Write(p)
	c.N -= int64(n)
	return n, err
}
