package oci

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// layeredRootfs is a container's writable root: an overlay whose lower
// layer is the image's read-only rootfs, or, where overlayfs cannot be
// mounted, a private copy of it.
type layeredRootfs struct {
	dir     string // holds upper/, work/, merged/ (or the copy in merged/)
	merged  string
	mounted bool
}

// makeRootfs builds dir/merged on top of image. With noOverlay it copies.
func makeRootfs(dir, image string, noOverlay bool) (*layeredRootfs, error) {
	r := &layeredRootfs{dir: dir, merged: filepath.Join(dir, "merged")}
	for _, d := range []string{"upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if !noOverlay {
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", image, filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
		if err := unix.Mount("overlay", r.merged, "overlay", 0, opts); err == nil {
			r.mounted = true
			return r, nil
		}
	}
	if err := copyTree(image, r.merged); err != nil {
		return nil, fmt.Errorf("copy rootfs: %w", err)
	}
	return r, nil
}

// remove unmounts the overlay and deletes the directory.
func (r *layeredRootfs) remove() error {
	if r.mounted {
		if err := unix.Unmount(r.merged, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			// Busy: detach it so the directory can go; the kernel frees it
			// when the last user leaves.
			if err2 := unix.Unmount(r.merged, unix.MNT_DETACH); err2 != nil {
				return fmt.Errorf("unmount %s: %w", r.merged, err)
			}
		}
		r.mounted = false
	}
	return os.RemoveAll(r.dir)
}

// copyTree copies src into the existing directory dst, keeping modes,
// owners, symlinks, hard links' content, device nodes and times.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		switch {
		case fi.IsDir():
			if rel != "." {
				if err := os.Mkdir(target, 0o755); err != nil {
					return err
				}
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return lchown(os.Symlink(l, target), target, st)
		case fi.Mode().IsRegular():
			if err := copyFile(p, target); err != nil {
				return err
			}
		default:
			if st == nil {
				return nil
			}
			if err := unix.Mknod(target, st.Mode, int(st.Rdev)); err != nil {
				return err
			}
		}
		if err := lchown(nil, target, st); err != nil {
			return err
		}
		if st != nil {
			if err := unix.Chmod(target, st.Mode&0o7777); err != nil {
				return err
			}
		}
		return os.Chtimes(target, fi.ModTime(), fi.ModTime())
	})
}

func lchown(err error, p string, st *syscall.Stat_t) error {
	if err != nil || st == nil || os.Geteuid() != 0 {
		return err
	}
	return os.Lchown(p, int(st.Uid), int(st.Gid))
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
