package output

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncData makes f's data durable with fdatasync(2), which skips the
// inode's timestamps: on a segment whose blocks newSegment wrote already,
// it commits no file-system journal transaction.
func syncData(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
