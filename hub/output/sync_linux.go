package output

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncData makes f's data durable with fdatasync(2), which skips the
// inode's timestamps: on a segment whose blocks were written already (a
// reused one, see newSegment), it commits no file-system journal
// transaction.
func syncData(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// preallocate gives f its size with blocks allocated (fallocate(2)), or,
// on a file system without it, as a hole. Either reads as zeros.
func preallocate(f *os.File, size int64) error {
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err == nil {
		return nil
	}
	return f.Truncate(size)
}
