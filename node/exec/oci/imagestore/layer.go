package imagestore

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// Whiteout markers of the OCI layer format.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	// maxSymlinks bounds symlink resolution inside a rootfs.
	maxSymlinks = 255
)

// decompress wraps r in the decompressor its magic bytes name: gzip, zstd,
// or none (plain tar).
func decompress(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, err
		}
		return zr, func() { zr.Close() }, nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}

// cleanRel makes a tar entry name a clean path relative to the rootfs;
// ok is false for the root itself.
func cleanRel(name string) (string, bool) {
	p := path.Clean("/" + strings.ReplaceAll(name, "\\", "/"))
	if p == "/" {
		return "", false
	}
	return p[1:], true
}

// secureJoin resolves rel inside root as if root were "/" (chroot
// semantics): symlinks in rel's parent components are followed but can
// never lead outside root, and ".." stops at root. The last component is
// not followed. The result is a host path under root.
func secureJoin(root, rel string) (string, error) {
	parts := strings.Split(rel, "/")
	var cur []string // resolved components below root
	hops := 0
	for i := 0; i < len(parts); i++ {
		c := parts[i]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) > 0 {
				cur = cur[:len(cur)-1]
			}
			continue
		}
		if i == len(parts)-1 {
			cur = append(cur, c)
			break
		}
		p := filepath.Join(append([]string{root}, append(cur, c)...)...)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			cur = append(cur, c)
			continue
		}
		hops++
		if hops > maxSymlinks {
			return "", fmt.Errorf("too many symlinks resolving %q", rel)
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			cur = cur[:0]
		}
		rest := append(strings.Split(target, "/"), parts[i+1:]...)
		parts = append(parts[:i+1:i+1], rest...)
	}
	return filepath.Join(append([]string{root}, cur...)...), nil
}

// ApplyLayer applies one layer (a tar, optionally gzip or zstd
// compressed) read from f onto the rootfs at root: first its whiteouts
// (".wh.NAME" removes NAME, ".wh..wh..opq" empties its directory of what
// lower layers put there), then its entries. Entry paths are confined to
// root whatever their names and the symlinks already there. f is read
// twice, so it must be seekable. Ownership and device nodes are restored
// only when running as root.
func ApplyLayer(root string, f io.ReadSeeker) error {
	// Pass 1: whiteouts, which only ever affect lower layers.
	if err := eachEntry(f, func(h *tar.Header, _ io.Reader) error {
		rel, ok := cleanRel(h.Name)
		if !ok {
			return nil
		}
		dir, base := path.Split(rel)
		if !strings.HasPrefix(base, whiteoutPrefix) {
			return nil
		}
		pdir, err := secureJoin(root, dir+"x")
		if err != nil {
			return err
		}
		pdir = filepath.Dir(pdir)
		if base == whiteoutOpaque {
			ents, err := os.ReadDir(pdir)
			if err != nil {
				return nil // nothing below to hide
			}
			for _, e := range ents {
				if err := os.RemoveAll(filepath.Join(pdir, e.Name())); err != nil {
					return err
				}
			}
			return nil
		}
		victim := strings.TrimPrefix(base, whiteoutPrefix)
		if victim == "" || victim == "." || victim == ".." {
			return nil
		}
		return os.RemoveAll(filepath.Join(pdir, victim))
	}); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	// Pass 2: the entries.
	type dirTime struct {
		p string
		t time.Time
	}
	var dirs []dirTime
	root0 := os.Geteuid() == 0
	err := eachEntry(f, func(h *tar.Header, r io.Reader) error {
		rel, ok := cleanRel(h.Name)
		if !ok {
			return nil
		}
		if strings.HasPrefix(path.Base(rel), whiteoutPrefix) {
			return nil
		}
		p, err := secureJoin(root, rel)
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := uint32(h.Mode & 0o7777)
		// Replace whatever is there, except a directory by a directory.
		if fi, err := os.Lstat(p); err == nil {
			if !(fi.IsDir() && h.Typeflag == tar.TypeDir) {
				if err := os.RemoveAll(p); err != nil {
					return err
				}
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			dirs = append(dirs, dirTime{p, h.ModTime})
		case tar.TypeReg: // archive/tar reports legacy TypeRegA entries as TypeReg
			out, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, r)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			lrel, ok := cleanRel(h.Linkname)
			if !ok {
				return fmt.Errorf("hard link %q to the root", h.Name)
			}
			target, err := secureJoin(root, lrel)
			if err != nil {
				return err
			}
			fi, err := os.Lstat(target)
			if err != nil {
				return fmt.Errorf("hard link %q: %w", h.Name, err)
			}
			if fi.IsDir() {
				return fmt.Errorf("hard link %q to a directory", h.Name)
			}
			if err := os.Link(target, p); err != nil {
				return err
			}
			return nil // a link shares its target's metadata
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			if !root0 && h.Typeflag != tar.TypeFifo {
				return nil
			}
			m := mode
			switch h.Typeflag {
			case tar.TypeChar:
				m |= unix.S_IFCHR
			case tar.TypeBlock:
				m |= unix.S_IFBLK
			default:
				m |= unix.S_IFIFO
			}
			if err := unix.Mknod(p, m, int(unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor)))); err != nil {
				return err
			}
		default:
			return nil // other types (e.g. GNU sparse metadata) are skipped
		}
		if root0 {
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
				return err
			}
		}
		if h.Typeflag != tar.TypeSymlink {
			// After chown, which clears setuid bits.
			if err := unix.Chmod(p, mode); err != nil {
				return err
			}
			if h.Typeflag != tar.TypeDir {
				_ = os.Chtimes(p, h.ModTime, h.ModTime)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Chtimes(dirs[i].p, dirs[i].t, dirs[i].t)
	}
	return nil
}

// eachEntry calls fn for each entry of the (optionally compressed) tar
// read from r.
func eachEntry(r io.Reader, fn func(*tar.Header, io.Reader) error) error {
	dr, done, err := decompress(r)
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	defer done()
	tr := tar.NewReader(dr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("layer: %w", err)
		}
		if err := fn(h, tr); err != nil {
			return fmt.Errorf("layer: %s: %w", h.Name, err)
		}
	}
}
