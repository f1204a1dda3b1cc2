package vmproto

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/vk-ci/vk/node/xfer/fileset"
)

// cleanRel checks a path of the job tree as the protocol gives it:
// relative, slash separated, without "..". It returns "." for the tree.
func cleanRel(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	c := path.Clean(p)
	if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("vmproto: path %q is outside the job tree", p)
	}
	return c, nil
}

// archive writes a tar stream of root/rel to w: directories, regular
// files and symbolic links (as links), named relative to rel; with only,
// just the entries on or below those paths (relative to rel) and the
// directories above them. Every access goes through an os.Root of the
// job tree, so a symbolic link the job made cannot make the agent read
// outside it; the walk never follows one, so a narrowed archive holds
// what the whole one holds at those paths.
func archive(root, rel string, only []string, w io.Writer) error {
	rel, err := cleanRel(rel)
	if err != nil {
		return err
	}
	roots := make([]string, 0, len(only))
	for _, o := range only {
		c, err := cleanRel(o)
		if err != nil {
			return err
		}
		if c == "." {
			roots = nil // the whole tree
			break
		}
		roots = append(roots, c)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	tw := tar.NewWriter(w)
	fsys := r.FS()
	err = fs.WalkDir(fsys, rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		name, _ := strings.CutPrefix(p, rel+"/")
		if p == rel {
			if !d.IsDir() {
				name = path.Base(p)
			} else {
				return nil // the directory itself: its entries only
			}
		}
		if rel == "." {
			name = p
		}
		if len(roots) > 0 && p != rel && !fileset.OnRoots(name, roots) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		var link string
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = r.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // devices, sockets, fifos: not part of a build tree's artifacts
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = name
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := r.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// extract unpacks the tar stream r into root/rel, creating rel. Entries
// are created through an os.Root of the target, so no name or link in
// the stream can place a file outside it; entries other than
// directories, regular files and symbolic links are refused. What it
// creates, rel and the directories on the way included, goes to own.
func extract(root, rel string, r io.Reader, own owner) error {
	rel, err := cleanRel(rel)
	if err != nil {
		return err
	}
	jr, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer jr.Close()
	if err := jr.MkdirAll(rel, 0o755); err != nil {
		return err
	}
	if err := own.chownPath(jr, rel); err != nil {
		return err
	}
	dst, err := jr.OpenRoot(rel)
	if err != nil {
		return err
	}
	defer dst.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name, err := cleanRel(h.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue
		}
		mode := fs.FileMode(h.Mode).Perm()
		if dir := path.Dir(name); dir != "." {
			if err := dst.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := own.chownPath(dst, dir); err != nil {
				return err
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := dst.MkdirAll(name, mode|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := dst.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = dst.Remove(name)
			if err := dst.Symlink(h.Linkname, name); err != nil {
				return err
			}
		default:
			return fmt.Errorf("vmproto: %s: tar entry type %q is not extracted", h.Name, h.Typeflag)
		}
		if err := own.chown(dst, name); err != nil {
			return err
		}
	}
}
