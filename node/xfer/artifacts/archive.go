package artifacts

import (
	"archive/zip"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vk-ci/vk/node/xfer/fileset"
)

// Format is an artifact archive format as GitLab names it.
type Format string

// The formats vk writes. GitLab also defines zipzstd and tarzstd; the node
// refuses them with [ErrUnsupportedFormat] (outcome failed), since vk-gitlab
// does not advertise them.
const (
	FormatZip  Format = "zip"  // one zip of every entry; "" means zip
	FormatGzip Format = "gzip" // concatenated gzip members, one per regular file
	FormatRaw  Format = "raw"  // exactly one regular file, as is
)

var (
	// ErrUnsupportedFormat is returned for an artifact_format vk does not write.
	ErrUnsupportedFormat = errors.New("artifacts: unsupported artifact format")
	// ErrRawNeedsOneFile is returned when a raw artifact selects other than
	// exactly one regular file.
	ErrRawNeedsOneFile = errors.New("artifacts: raw format needs exactly one file")
)

func normFormat(f string) (Format, error) {
	switch Format(strings.ToLower(f)) {
	case "", FormatZip:
		return FormatZip, nil
	case FormatGzip:
		return FormatGzip, nil
	case FormatRaw:
		return FormatRaw, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnsupportedFormat, f)
}

// fileName is the multipart file name: the artifact name plus the format's
// extension (gitlab-runner's rule); "default" when the name is empty. For
// raw, the name is used as is.
func fileName(name string, f Format) string {
	if name == "" {
		name = "default"
	}
	switch f {
	case FormatZip:
		return name + ".zip"
	case FormatGzip:
		return name + ".gz"
	}
	return name
}

// WriteZip writes the entries below root as a zip archive to w. Symlinks
// are stored as links (mode bits + target as content), directories as
// "name/" entries, regular files deflated with their mode and mtime.
func WriteZip(ctx context.Context, w io.Writer, root string, entries []fileset.Entry) error {
	zw := zip.NewWriter(w)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := filepath.Join(root, filepath.FromSlash(e.Path))
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		h, err := zip.FileInfoHeader(info)
		if err != nil {
			return err
		}
		h.Name = e.Path
		switch {
		case info.IsDir():
			h.Name += "/"
			h.Method = zip.Store
			if _, err := zw.CreateHeader(h); err != nil {
				return err
			}
		case info.Mode()&fs.ModeSymlink != 0:
			h.Method = zip.Store
			fw, err := zw.CreateHeader(h)
			if err != nil {
				return err
			}
			if _, err := io.WriteString(fw, e.Link); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			h.Method = zip.Deflate
			fw, err := zw.CreateHeader(h)
			if err != nil {
				return err
			}
			if err := copyFile(fw, p); err != nil {
				return err
			}
		}
	}
	return zw.Close()
}

// WriteGzip writes every regular file as its own gzip member (header Name =
// the relative path), concatenated, as gitlab-runner's gzip archiver does.
func WriteGzip(ctx context.Context, w io.Writer, root string, entries []fileset.Entry) error {
	for _, e := range entries {
		if !e.Mode.IsRegular() {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		p := filepath.Join(root, filepath.FromSlash(e.Path))
		info, err := os.Stat(p)
		if err != nil {
			return err
		}
		gw := gzip.NewWriter(w)
		gw.Name = e.Path
		gw.ModTime = info.ModTime()
		if err := copyFile(gw, p); err != nil {
			return err
		}
		if err := gw.Close(); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// ExtractZip extracts the zip at path into x's root, applying the
// [fileset.Extractor] safety rules (no absolute or ".." names, never
// through a symlink, total size capped). Entries are extracted in archive
// order; permission bits come from the archive.
func ExtractZip(ctx context.Context, zipPath string, x *fileset.Extractor) (int, error) {
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return 0, fmt.Errorf("artifacts: open zip: %w", err)
	}
	defer zr.Close()
	return extractZip(ctx, &zr.Reader, x)
}

func extractZip(ctx context.Context, zr *zip.Reader, x *fileset.Extractor) (int, error) {
	n := 0
	for _, f := range zr.File {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		mode := f.Mode()
		switch {
		case mode.IsDir() || strings.HasSuffix(f.Name, "/"):
			if err := x.Dir(f.Name, mode); err != nil {
				return n, err
			}
		case mode&fs.ModeSymlink != 0:
			rc, err := f.Open()
			if err != nil {
				return n, err
			}
			target, err := io.ReadAll(io.LimitReader(rc, 4096))
			rc.Close()
			if err != nil {
				return n, err
			}
			if err := x.Symlink(f.Name, string(target)); err != nil {
				return n, err
			}
		case mode.IsRegular():
			rc, err := f.Open()
			if err != nil {
				return n, err
			}
			err = x.File(f.Name, mode, rc)
			rc.Close()
			if err != nil {
				return n, err
			}
		default:
			continue // devices, fifos: never extracted
		}
		n++
	}
	return n, nil
}
