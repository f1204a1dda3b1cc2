package imagestore

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Whiteout markers of the OCI layer format. The flattened tar that
// mutate.Extract gives holds none; a stray one is skipped, never written.
const (
	whiteoutPrefix = ".wh."
	// maxSymlinks bounds symlink resolution inside a rootfs.
	maxSymlinks = 255
)

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

// extractTar writes the entries of the plain tar read from r onto the
// rootfs at root, replacing what is there (a directory stays a directory).
// The store feeds it an image flattened by mutate.Extract, so whiteouts
// are already applied. Entry paths are confined to root whatever their
// names and the symlinks already there. Hard links are made after every
// other entry, since a flattened tar lists upper layers first and a link
// may come before its target. Ownership and device nodes are restored
// only when running as root.
//
// go-containerregistry has no counterpart: it flattens into a tar stream
// and leaves writing it to disk, confined, to the caller.
func extractTar(root string, r io.Reader) error {
	w := &treeWriter{root: root, asRoot: os.Geteuid() == 0}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("layer: %w", err)
		}
		if err := w.entry(h, tr); err != nil {
			return fmt.Errorf("layer: %s: %w", h.Name, err)
		}
	}
	for _, h := range w.links {
		if err := w.hardLink(h); err != nil {
			return fmt.Errorf("layer: %s: %w", h.Name, err)
		}
	}
	for i := len(w.dirs) - 1; i >= 0; i-- {
		_ = os.Chtimes(w.dirs[i].p, w.dirs[i].t, w.dirs[i].t)
	}
	return nil
}

// treeWriter is extractTar's state.
type treeWriter struct {
	root   string
	asRoot bool          // running as root: restore owners and devices
	links  []*tar.Header // hard links, made last
	dirs   []dirTime     // directories' times, set last
}

type dirTime struct {
	p string
	t time.Time
}

// place resolves an entry's name to a host path under the root, makes its
// parent and removes what is in the way; "" means skip the entry.
func (w *treeWriter) place(h *tar.Header) (string, error) {
	rel, ok := cleanRel(h.Name)
	if !ok || strings.HasPrefix(path.Base(rel), whiteoutPrefix) {
		return "", nil
	}
	p, err := secureJoin(w.root, rel)
	if err != nil || p == w.root {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	// Replace whatever is there, except a directory by a directory.
	if fi, err := os.Lstat(p); err == nil && !(fi.IsDir() && h.Typeflag == tar.TypeDir) {
		if err := os.RemoveAll(p); err != nil {
			return "", err
		}
	}
	return p, nil
}

// entry writes one entry, a hard link excepted (kept for the end).
func (w *treeWriter) entry(h *tar.Header, r io.Reader) error {
	if h.Typeflag == tar.TypeLink {
		w.links = append(w.links, h)
		return nil
	}
	p, err := w.place(h)
	if err != nil || p == "" {
		return err
	}
	mode := uint32(h.Mode & 0o7777)
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		w.dirs = append(w.dirs, dirTime{p, h.ModTime})
	case tar.TypeReg: // archive/tar reports legacy TypeRegA entries as TypeReg
		if err := writeFile(p, r); err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := os.Symlink(h.Linkname, p); err != nil {
			return err
		}
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if !w.asRoot && h.Typeflag != tar.TypeFifo {
			return nil
		}
		if err := mknod(p, h, mode); err != nil {
			return err
		}
	default:
		return nil // other types (e.g. GNU sparse metadata) are skipped
	}
	return w.meta(p, h, mode)
}

// meta restores an entry's owner (as root), mode and times.
func (w *treeWriter) meta(p string, h *tar.Header, mode uint32) error {
	if w.asRoot {
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			return err
		}
	}
	if h.Typeflag == tar.TypeSymlink {
		return nil
	}
	// After chown, which clears setuid bits.
	if err := unix.Chmod(p, mode); err != nil {
		return err
	}
	if h.Typeflag != tar.TypeDir {
		_ = os.Chtimes(p, h.ModTime, h.ModTime)
	}
	return nil
}

// hardLink makes a hard link to a file already in the rootfs; a link
// shares its target's metadata.
func (w *treeWriter) hardLink(h *tar.Header) error {
	p, err := w.place(h)
	if err != nil || p == "" {
		return err
	}
	lrel, ok := cleanRel(h.Linkname)
	if !ok {
		return fmt.Errorf("hard link %q to the root", h.Name)
	}
	target, err := secureJoin(w.root, lrel)
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
	return os.Link(target, p)
}

func writeFile(p string, r io.Reader) error {
	out, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func mknod(p string, h *tar.Header, mode uint32) error {
	switch h.Typeflag {
	case tar.TypeChar:
		mode |= unix.S_IFCHR
	case tar.TypeBlock:
		mode |= unix.S_IFBLK
	default:
		mode |= unix.S_IFIFO
	}
	return unix.Mknod(p, mode, int(unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor))))
}
