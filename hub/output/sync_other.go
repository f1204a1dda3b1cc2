//go:build !linux

package output

import "os"

// syncData makes f's data durable (fsync: fdatasync is Linux's).
func syncData(f *os.File) error { return f.Sync() }

// preallocate gives f its size, as a hole that reads as zeros.
func preallocate(f *os.File, size int64) error { return f.Truncate(size) }
