//go:build !linux

package output

import "os"

// syncData makes f's data durable (fsync: fdatasync is Linux's).
func syncData(f *os.File) error { return f.Sync() }
