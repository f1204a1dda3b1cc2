package cache

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/vk-ci/vk/node/xfer/fileset"
)

// writeLayer writes entries below root as a deterministic tar+zstd stream
// to w: entries in path order, uid/gid 0, no user or group names, no
// access/change times, permission bits only, file mtimes truncated to
// whole seconds, directory and symlink mtimes fixed at the Unix epoch. The
// same tree (same contents, modes and file mtimes) always yields the same
// bytes, so an unchanged cache has an unchanged digest (XFER-09);
// extraction restores file mtimes, so restore + archive of an untouched
// cache is a no-op too.
func writeLayer(ctx context.Context, w io.Writer, root string, entries []fileset.Entry) error {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	buf := make([]byte, 256<<10)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := filepath.Join(root, filepath.FromSlash(e.Path))
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{
			Name:    e.Path,
			Mode:    int64(info.Mode().Perm()),
			ModTime: info.ModTime().Truncate(time.Second),
			Format:  tar.FormatPAX,
		}
		switch {
		case info.IsDir():
			// Directory mtimes change whenever a job adds and removes a
			// temp file; they are not part of a cache's identity.
			h.Typeflag, h.Name, h.ModTime = tar.TypeDir, e.Path+"/", time.Unix(0, 0)
		case info.Mode()&fs.ModeSymlink != 0:
			h.Typeflag, h.ModTime = tar.TypeSymlink, time.Unix(0, 0) // links' own times are not restorable
			if h.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
		default:
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyBuffer(tw, io.LimitReader(f, h.Size), buf)
			f.Close()
			if err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// ErrBadLayer is returned (wrapped) for a cache layer that is not tar+zstd.
var ErrBadLayer = errors.New("cache: corrupt cache layer")

// extractLayer reads a tar+zstd stream into x's root with the
// [fileset.Extractor] safety rules, restoring permission bits and the
// mtimes of regular files (directories keep the time of extraction).
func extractLayer(ctx context.Context, r io.Reader, x *fileset.Extractor) (int, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(256<<20))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadLayer, err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	n := 0
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, fmt.Errorf("%w: %v", ErrBadLayer, err)
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := x.Dir(h.Name, mode); err != nil {
				return n, err
			}
		case tar.TypeSymlink:
			if err := x.Symlink(h.Name, h.Linkname); err != nil {
				return n, err
			}
		case tar.TypeReg:
			if err := x.File(h.Name, mode, tr); err != nil {
				return n, err
			}
			if p, err := x.Target(h.Name); err == nil {
				os.Chtimes(p, h.ModTime, h.ModTime)
			}
		default:
			continue // hard links, devices, fifos: never restored
		}
		n++
	}
	return n, nil
}
